"""``python -m ludic_core.cli``: the ``ludic`` command."""

from ludic_core.cli.main import console_main

if __name__ == "__main__":  # importing the module (an import-everything check) runs nothing
    console_main()
