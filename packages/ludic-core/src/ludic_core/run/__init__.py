"""The run layer under the ``ludic`` command: typed run configs read from TOML and overrides
(:mod:`.configs`, :mod:`.loading`), env eval profiles (:mod:`.profiles`), the episodes of a run
(:mod:`.episodes`, :mod:`.rl`), the backends of ``ludic eval`` (:mod:`.backends`), the training recipes
(:mod:`.recipes`) and the samplers they train with (:mod:`.samplers`), registered by entry point, so a
package Ludic does not know adds one without editing Ludic."""
