"""ludic-envs: environments for Ludic.

Tic-Tac-Toe against a built-in opponent (:class:`TicTacToeEnv`), one decision graded by the solver
(:class:`TicTacToeMoveEnv`) and in self-play (:class:`TicTacToeSelfPlayEnv`); dataset question answering with answer checking (:class:`DatasetQAEnv`,
:func:`make_gsm8k_env`, :func:`make_math_env`); Python programs run against tests in a sandbox
(:class:`CodeExecEnv`, :class:`SandboxPool`); datasets as resumable request streams
(:class:`DatasetRequestStream`). Every env is a ``ludic.envs`` entry point
(``ludic_core.make_env("tictactoe")``). Names resolve on first use, and optional dependencies
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
        TicTacToeMoveEnv,
        TicTacToeRewards,
        TicTacToeSelfPlayEnv,
        make_opponent,
    )

__version__ = "0.1.0"

if not TYPE_CHECKING:
    from ludic_core.exports import lazy_attributes

    __getattr__, __dir__ = lazy_attributes(globals())
