"""The ``ludic`` command line (also ``python -m ludic_core.cli``): ``ludic envs``, ``ludic eval``,
``ludic rollouts``, and the subcommands other installed packages contribute (see :mod:`ludic_core.cli.main`)."""

from ludic_core.cli.main import main

__all__ = ["main"]
