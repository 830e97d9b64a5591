"""ludic-envs: environments for Ludic.

* :mod:`ludic_envs.tictactoe` — Tic-Tac-Toe against a built-in opponent and two-player self-play;
* :mod:`ludic_envs.qa` — dataset question answering (GSM8K, MATH) with answer checking;
* :mod:`ludic_envs.codeexec` — Python programs run against tests in a sandbox;
* :mod:`ludic_envs.dataset_requests` — datasets as resumable streams of rollout requests.

Every env is registered under the ``ludic.envs`` entry-point group, so
``ludic_core.registry.make_env("tictactoe")`` works once the package is installed. Importing this
package imports none of the submodules; optional dependencies (``datasets``, ``math-verify``) are
imported only when a feature needs them.
"""

__version__ = "0.1.0"
