"""Commands beside the pipeline's stages: deterministic fixture tiles (:mod:`~pipeline.tools.fixtures`),
the case-study demo (:mod:`~pipeline.tools.demo`) and the machine check (:mod:`~pipeline.tools.doctor`)."""
