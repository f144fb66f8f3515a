"""The pieces of one serving engine's step, which :func:`explorer.simulate.simulate` assembles into a
served operating point (the closed or open loop) and its results.  Data flows one way:

* :mod:`~explorer.engine.constants` -- bytes of the tensors kept in bf16, small kernels per layer;
* :mod:`~explorer.engine.shape_columns` -- the design table's shape, deployment and runtime columns
  as per-GPU sizes (:class:`~explorer.engine.shape_columns.ShapeColumns`);
* :mod:`~explorer.engine.hardware_columns` -- the hardware kind's columns and the stacked GEMM runner
  (:class:`~explorer.engine.hardware_columns.HardwareColumns`);
* :mod:`~explorer.engine.layer_step` -- one stage step: token counts and GEMM requests, then the
  per-GPU times of GEMMs, attention, MoE, collectives and kernel launches;
* :mod:`~explorer.engine.engine_step` -- one engine's decode step, the engine time one prompt costs,
  the time to first token without queueing, host and front-end work, speculative drafting.

The formulas themselves live one level down, in :mod:`explorer.costs` (GEMM tiles and waves,
attention, collectives), each once."""
