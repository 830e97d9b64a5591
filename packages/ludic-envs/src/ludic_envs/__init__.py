"""ludic-envs: environments for Ludic.

* Tic-Tac-Toe against a built-in opponent (:class:`TicTacToeEnv`) and two-player self-play
  (:class:`TicTacToeSelfPlayEnv`);
* dataset question answering (:class:`DatasetQAEnv`; GSM8K and MATH through :func:`make_gsm8k_env`,
  :func:`make_math_env`) with answer checking;
* Python programs run against tests in a sandbox (:class:`CodeExecEnv`, :class:`SandboxPool`);
* datasets as resumable streams of rollout requests (:class:`DatasetRequestStream`).

The submodules (:mod:`ludic_envs.tictactoe`, :mod:`ludic_envs.qa`, :mod:`ludic_envs.codeexec`,
:mod:`ludic_envs.dataset_requests`) hold the rest and keep every name importable where it was.

Every env is registered under the ``ludic.envs`` entry-point group, so
``ludic_core.make_env("tictactoe")`` works once the package is installed. Importing this package
imports none of the submodules (the names above resolve on first use); optional dependencies
(``datasets``, ``math-verify``) are imported only when a feature needs them.
"""

# Not ``typing.TYPE_CHECKING``: importing ``typing`` would cost more than the rest of this module.
# Type checkers treat any ``TYPE_CHECKING`` name as true.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from ludic_envs.codeexec import (
        CodeExecEnv,
        ExecutionRequest,
        ExecutionResult,
        SandboxLimits,
        SandboxPool,
    )
    from ludic_envs.dataset_requests import DatasetRequestStream, indexed_env_requests
    from ludic_envs.qa import DatasetQAEnv, MathQAEnv, load_rows, make_gsm8k_env, make_math_env
    from ludic_envs.tictactoe import (
        TicTacToeEnv,
        TicTacToeRewards,
        TicTacToeSelfPlayEnv,
        make_opponent,
    )

__version__ = "0.1.0"

if not TYPE_CHECKING:
    from ludic_core.exports import lazy_attributes

    __getattr__, __dir__ = lazy_attributes(globals())
