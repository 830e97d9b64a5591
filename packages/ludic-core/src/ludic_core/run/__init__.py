"""The run layer under the ``ludic`` command: run configs (:mod:`.configs`, :mod:`.loading`), eval
profiles, the episodes of a run, the backends of ``ludic eval``, the training recipes (:mod:`.recipes`)
and the samplers they train with (:mod:`.samplers`), both registered by entry point."""
