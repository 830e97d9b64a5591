"""ludic-core: the torch-free contracts and data plane of Ludic.

Import from the submodules (``ludic_core.types``, ``ludic_core.env``, ``ludic_core.protocols`` …);
this package root only carries the version.
"""

__version__ = "0.1.0"
