"""Modelling constants of one engine step that several pieces share (bytes of the tensors kept in
bf16, small kernels per layer, the smallest expert-GEMM tile).  Each carries its source or says it
is an assumption."""

#: Bytes per element of tensor-parallel all-reduces (bf16 even for FP8/FP4 models, as
#: TensorRT-LLM's default all-reduce runs).
ALLREDUCE_BYTES = 2.0
#: the largest tensor-parallel group a runtime's custom all-reduce serves (vLLM custom_all_reduce.py:
#: world sizes 2, 4, 6, 8; beyond, NCCL)
CUSTOM_ALLREDUCE_MAX_GPUS = 8
#: Bytes per element of the LM head and embedding tables (kept bf16: TensorRT-LLM and vLLM FP8/FP4
#: checkpoints keep ``lm_head`` unquantized; explorer/simulate.py module docstring).
EMBED_BYTES = 2.0
#: Bytes per element of MoE combine (expert outputs return in bf16; dispatch uses b_a).
COMBINE_BYTES = 2.0
#: Small kernels per layer besides GEMMs, attention and collectives: 2 norms, rotary, activation
#: (assumption: residual adds and quantization fused).  Each costs ``kernel_launch_s``.
ELEMENTWISE_KERNELS_PER_LAYER = 4.0
#: Extra small kernels per MoE layer: top-k routing, permute, unpermute (assumption).
MOE_EXTRA_KERNELS = 3.0

#: Token rows of the smallest tile a grouped expert GEMM may use: MoE kernels size their M tile to
#: the tokens per expert (vLLM/SGLang fused_moe tuned configs use BLOCK_SIZE_M 16 for small
#: groups; TensorRT-LLM's MoE GEMMs swap A and B so tokens sit on the MMA's N side).
MOE_SMALL_TILE_M = 16.0
#: Extra kernels on the critical path of an MLA layer's decode attention, over the GQA layer's qkv GEMM,
#: rotary, attention and o GEMM (absorbed MLA: fused q_a/kv_a GEMM, q_a RMSNorm (kv_a's runs beside it),
#: q_b GEMM, the k_b batched GEMM (rotary and cache append beside it), attention, the v_b batched GEMM,
#: o GEMM: 7 kernels against 4).  Source: TensorRT-LLM tensorrt_llm/_torch/modules/attention.py
#: ``MLA.forward_impl`` / ``forward_absorption_generation`` (maybe_execute_in_parallel on the aux
#: stream for the two norms and for the k_b BMM with ``mla_rope_generation``).  Runtimes without the
#: aux stream launch one or two more (not modelled).
MLA_EXTRA_KERNELS = 3.0
