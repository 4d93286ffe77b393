"""The GPU-kernel section of the pattern table, on kernel names as real traces spell them
(most copied from CUDA/ROCm profiles; constructed look-alikes are marked)."""

from __future__ import annotations

import pytest

from bertscope.taxonomy import Category, Classifier, builtin_patterns
from tests.data.traces import make_traces as k
from tests.data.traces import make_wild as w

C = Category

CASES: list[tuple[str, Category]] = [
    # NVIDIA cuBLAS / cuBLASLt / CUTLASS / xmma
    (k.SGEMM, C.GEMM), (k.SGEMM_NN, C.GEMM), (k.XMMA_SM90, C.GEMM), (k.XMMA_SM80, C.GEMM),
    (k.HGEMM, C.GEMM), (k.NVJET, C.GEMM), ("nvjet_hsh_256x128_64x4_2x1_v_bz_coopB_TNN", C.GEMM),
    (k.CUTLASS, C.GEMM), (k.CUTLASS_WMMA, C.GEMM), (k.CUTLASS_K2, C.GEMM),
    ("void cutlass::device_kernel<cutlass::gemm::kernel::GemmUniversal<cute::tuple<int, int, "
     "int, int>, cutlass::gemm::collective::CollectiveMma<...> > >(...)", C.GEMM),
    ("void cutlass::Kernel2<cutlass::reduction::kernel::ReduceSplitK<cutlass::MatrixShape<4, "
     "128>, ...> >(...)", C.GEMM),
    (k.SPLITK, C.GEMM), ("void cublasLt::splitKreduce_kernel<32, 16, int, float, float>(...)",
                         C.GEMM),
    (k.GEMMSN, C.GEMM), (k.GEMMK1, C.GEMM), (k.LT_EPILOGUE, C.GEMM),
    # GEMV is a linear layer's product with one row/column: GEMM category (memory-bound)
    (k.GEMV, C.GEMM), ("void gemvNSP_kernel<float, float, float, float, 1, 16, 4, 1024, "
                       "cublasGemvParamsEx<...> >(...)", C.GEMM),
    ("void xmma_cudnn::gemm::kernel<xmma_cudnn::implicit_gemm::fprop::Kernel_traits<...> >"
     "(...)", C.CONVOLUTION),
    ("void deep_gemm::fp8_gemm_kernel<4096u, 7168u, 128u, 160u, 128u, 1u, 8u, 128u, 4u, "
     "(deep_gemm::GemmType)0>(...)", C.GEMM),
    # cuDNN: convolutions (implicit GEMM), layout transforms, SDPA; a "relu" in a cuDNN
    # convolution's name is its fused epilogue, not an activation kernel
    (k.CUDNN_CONV, C.CONVOLUTION), (k.CUDNN_NCHW, C.DATA_MOVEMENT),
    (k.CUDNN_SDPA, C.BATCHED_GEMM),
    ("volta_fp16_s884cudnn_fp16_256x128_ldg8_splitK_relu_f2f_exp_small_nhwc2nchw_tn_v1",
     C.CONVOLUTION),
    (w.CONV_FPROP, C.CONVOLUTION), (w.CONV_RELU, C.CONVOLUTION),
    (w.CONV_WINOGRAD_RELU, C.CONVOLUTION), (w.CONV_IMPLICIT, C.CONVOLUTION),
    (w.CONV_DGRAD, C.CONVOLUTION), (w.CONV_DGRAD_ENGINE, C.CONVOLUTION),
    (w.CONV_WGRAD, C.CONVOLUTION), (w.CONV_WGRAD_ENGINE, C.CONVOLUTION),
    (w.WINOGRAD_WGRAD, C.CONVOLUTION), (w.SCALE_PACKED, C.CONVOLUTION),
    (w.CUTLASS_FPROP, C.CONVOLUTION), (w.CUTLASS_DGRAD, C.CONVOLUTION),
    (w.CUTLASS_WGRAD, C.CONVOLUTION),
    ("void cutlass::Kernel<cutlass::conv::kernel::ImplicitGemmConvolution<cutlass::conv::"
     "threadblock::ImplicitGemmMultistage<cutlass::gemm::GemmShape<128, 128, 32> > > >(...)",
     C.CONVOLUTION),
    ("igemm_wrw_gtcx_nhwc_fp16_bx0_ex1_bt128x128x16_wt32x32x8_ws1x1_wr2x2", C.CONVOLUTION),
    ("igemm_fwd_gtcx_nhwc_fp16_bx0_ex1_bt256x128x32_wt32x32x8_ws2x1_wr2x2_ta1x8x2x1",
     C.CONVOLUTION),  # MIOpen (ROCm)
    # batch norm and RMSNorm are their own normalization kinds
    ("void cudnn::bn_fw_tr_1C11_kernel_NCHW<float, float, int, 512, true, 1>(...)",
     C.BATCHNORM),
    (w.BN_FW, C.BATCHNORM), (w.BN_BW, C.BATCHNORM), (w.BN_STATS, C.BATCHNORM),
    (w.BN_TRANSFORM, C.BATCHNORM), (w.BN_BWD_REDUCE, C.BATCHNORM),
    (w.BN_BWD_ELEMT, C.BATCHNORM),
    ("void at::native::(anonymous namespace)::rms_norm_kernel<float>(...)", C.RMSNORM),
    # FBGEMM table-batched embeddings; cuBLASLt epilogues and BLAS-1 helpers; MAGMA
    (w.TBE_FWD, C.EMBEDDING), (w.TBE_BWD_CTA, C.EMBEDDING), (w.TBE_BWD_WARP, C.EMBEDDING),
    (w.PERMUTE_POOLED, C.EMBEDDING), ("permute_pooled_embs_kernel", C.EMBEDDING),
    (w.LINEARIZE, C.EMBEDDING), (w.BOUNDS_CHECK, C.EMBEDDING), (w.BAG_FWD, C.EMBEDDING),
    (w.BAG_GRAD, C.EMBEDDING), (w.BAG_SCATTER, C.EMBEDDING),
    ("void fbgemm_gpu::jagged_dense_elementwise_dense_output_kernel_<32, float>(...)",
     C.DATA_MOVEMENT),
    ("void _block_bucketize_sparse_features_cuda_kernel1<int, long>(...)", C.DATA_MOVEMENT),
    (w.LT_GEMM, C.GEMM), (w.LT_EPILOGUE, C.GEMM), (w.LT_SPLITK, C.GEMM), (w.DOT, C.GEMM),
    ("void cutlass::device_kernel<cutlass3x_sm90_tensorop_s64x128x16gemm_f16_f16_f32_void_"
     "f32_128x128x64_1x2x1_0_tnn_align8_warpspecialized_cooperative_epi_tma>(...)", C.GEMM),
    (w.MAGMA_GEMM, C.GEMM), (w.MAGMA_GEMM_BATCHED, C.GEMM),
    (w.MAGMA_GETRF, C.OTHER), (w.MAGMA_POTF2, C.OTHER), (w.MAGMA_LASWP, C.OTHER),
    (w.MAGMA_TRSM, C.OTHER),
    # fused attention
    (k.FLASH_FWD, C.BATCHED_GEMM), (k.FLASH_BWD, C.BATCHED_GEMM),
    (k.FMHA_CUTLASS_B, C.BATCHED_GEMM), (k.CK_FMHA, C.BATCHED_GEMM),
    ("fmha_cutlassF_f32_aligned_64x64_rf_sm80(PyTorchMemEffAttention::AttentionKernel<float, "
     "cutlass::arch::Sm80, true, 64, 64, 64, true, true>::Params)", C.BATCHED_GEMM),
    ("void cutlass::device_kernel<flash::enable_sm90_or_later<flash::FlashAttnFwdSm90<...> > >"
     "(...)", C.BATCHED_GEMM),
    # Triton (Inductor)
    (k.TRITON["tem_mm"], C.GEMM), (k.TRITON["tem_addmm"], C.GEMM),
    (k.TRITON["tem_bmm"], C.BATCHED_GEMM), ("triton_tem_fused_flex_attention_0", C.BATCHED_GEMM),
    (k.TRITON["gelu"], C.ACTIVATION), (k.TRITON["gelu_bwd"], C.ACTIVATION),
    (k.TRITON["add"], C.ELEMENTWISE), (k.TRITON["to_copy"], C.DATA_MOVEMENT),
    (k.TRITON["clone"], C.DATA_MOVEMENT), ("triton_poi_fused_add_clone_3", C.ELEMENTWISE),
    (k.TRITON["softmax"], C.SOFTMAX), ("triton_per_fused__softmax_backward_data_2", C.SOFTMAX),
    (k.TRITON["layer_norm"], C.LAYERNORM), (k.TRITON["layer_norm_bwd"], C.LAYERNORM),
    ("triton_red_fused_native_batch_norm_backward_relu_threshold_backward_4", C.BATCHNORM),
    ("triton_per_fused__fused_rms_norm_3", C.RMSNORM),
    ("triton_poi_fused_convolution_relu_1", C.CONVOLUTION), ("triton_poi_3", C.ELEMENTWISE),
    (k.TRITON["dropout"], C.DROPOUT), (k.TRITON["nll"], C.LOSS),
    (k.TRITON["embedding"], C.EMBEDDING), (k.TRITON["embedding_bwd"], C.EMBEDDING),
    (k.TRITON["sum"], C.REDUCTION), (k.TRITON["per_sum"], C.REDUCTION),
    (k.TRITON["foreach"], C.OPTIMIZER), ("triton_poi_fused__foreach_addcdiv_0", C.OPTIMIZER),
    # PyTorch native kernels
    (k.GELU, C.ACTIVATION), (k.GELU_BWD, C.ACTIVATION),
    ("void at::native::vectorized_elementwise_kernel<4, at::native::(anonymous namespace)::"
     "launch_clamp_scalar(at::TensorIteratorBase&, c10::Scalar, c10::Scalar, at::native::"
     "detail::ClampLimits)::{lambda()#1}::operator()() const::{lambda()#7}::operator()() "
     "const::{lambda(float)#1}, at::detail::Array<char*, 2> >(...)", C.ELEMENTWISE),
    ("void at::native::vectorized_elementwise_kernel<4, at::native::(anonymous namespace)::"
     "threshold_kernel_impl<float>(at::TensorIteratorBase&, float, float)::{lambda(float, "
     "float)#1}, at::detail::Array<char*, 3> >(...)", C.ACTIVATION),
    (k.LN, C.LAYERNORM), (k.LN_HALF, C.LAYERNORM), (k.LN_BWD_IN, C.LAYERNORM),
    (k.LN_BWD_GB, C.LAYERNORM),
    ("void at::native::(anonymous namespace)::RowwiseMomentsCUDAKernel<float>(long, float, "
     "float const*, float*, float*)", C.LAYERNORM),
    (k.SOFTMAX, C.SOFTMAX), (k.SOFTMAX_BWD, C.SOFTMAX), (k.WARP_SOFTMAX, C.SOFTMAX),
    (k.MEGATRON_SOFTMAX, C.SOFTMAX),
    # look-alikes: log-softmax kernels are the loss (LogSoftMax epilogue, is_log_softmax=true)
    (k.LOGSOFTMAX, C.LOSS), (k.WARP_LOGSOFTMAX_BWD, C.LOSS), (k.NLL, C.LOSS),
    (k.NLL_BWD, C.LOSS),
    (k.DROPOUT, C.DROPOUT), (k.DROPOUT_BWD, C.DROPOUT),
    ("void at::native::(anonymous namespace)::distribution_elementwise_grid_stride_kernel<float,"
     " 4, at::native::templates::cuda::bernoulli_(...)::{lambda(float)#1}>(...)", C.DROPOUT),
    (k.REDUCE_SUM, C.REDUCTION),
    ("void at_cuda_detail::cub::DeviceReduceKernel<at_cuda_detail::cub::DeviceReducePolicy<"
     "float, float, int, at_cuda_detail::cub::Sum>::Policy600, float*, float*, int>(...)",
     C.REDUCTION),
    (k.INDEX_SELECT, C.DATA_MOVEMENT), (k.COPY, C.DATA_MOVEMENT),
    ("void at::native::(anonymous namespace)::CatArrayBatchedCopy_aligned16_contig<float, "
     "unsigned int, 2, 128, 1>(...)", C.DATA_MOVEMENT),
    ("void at::native::index_elementwise_kernel<128, 4, at::native::gpu_index_kernel<...> >"
     "(...)", C.DATA_MOVEMENT),
    ("void at_cuda_detail::cub::DeviceRadixSortOnesweepKernel<...>(...)", C.DATA_MOVEMENT),
    (k.EMB_BWD, C.EMBEDDING),
    ("void at::native::(anonymous namespace)::compute_grad_weight<float, long>(...)",
     C.EMBEDDING),
    ("void fbgemm_gpu::split_embedding_codegen_forward_unweighted_kernel<float, float, ...>"
     "(...)", C.EMBEDDING),
    (k.ADD, C.ELEMENTWISE), (k.MUL, C.ELEMENTWISE), (k.FILL, C.ELEMENTWISE),
    # look-alikes: "gemm" in a library or template name, not a GEMM
    (k.FBGEMM_PERMUTE, C.DATA_MOVEMENT), (k.FBGEMM_QUANT, C.DATA_MOVEMENT),
    (k.NATIVE_GEMM_LOOKALIKE, C.ELEMENTWISE),  # constructed: gemm in a functor name
    # optimizers: the functor inside multi_tensor_apply_kernel tells which
    (k.FUSED_ADAMW, C.OPTIMIZER), (k.FUSED_SGD, C.OPTIMIZER), (k.LAMB1, C.OPTIMIZER),
    (k.LAMB2, C.OPTIMIZER), (k.FOREACH_MUL, C.OPTIMIZER),
    ("void multi_tensor_apply_kernel<TensorListMetadata<4>, AdamFunctor<float>, float, float, "
     "float, float, float, float, adamMode_t, float>(...)", C.OPTIMIZER),
    ("void at::native::amp_update_scale_cuda_kernel(float*, int*, float const*, double, "
     "double, int)", C.OPTIMIZER),
    # look-alikes: norms inside multi_tensor_apply are reductions (clipping, LAMB norms)
    (k.LPNORM, C.REDUCTION), (k.L2NORM, C.REDUCTION),
    ("void at::native::(anonymous namespace)::lpnorm_cleanup<float, (at::native::(anonymous "
     "namespace)::NormType)1, float, float>(float const*, at::native::(anonymous namespace)::"
     "TensorListAddresses, int)", C.REDUCTION),
    # apex, Transformer Engine
    (k.APEX_LN, C.LAYERNORM), (k.APEX_LN_BWD, C.LAYERNORM),
    ("void transformer_engine::rmsnorm::rmsnorm_fwd_tuned_kernel<...>(...)", C.RMSNORM),
    ("void transformer_engine::cast_transpose_kernel<8, 4, float, __nv_fp8_e4m3>(...)",
     C.DATA_MOVEMENT),
    # collectives
    (k.NCCL_AR, C.COMMUNICATION), (k.NCCL_AR_OLD, C.COMMUNICATION),
    (k.NCCL_RS, C.COMMUNICATION), (k.NCCL_AG, C.COMMUNICATION),
    ("ncclDevKernel_SendRecv(ncclDevKernelArgsStorage<4096ul>)", C.COMMUNICATION),
    ("ncclDevKernel_Generic_4(ncclDevKernelArgsStorage<4096ul>)", C.COMMUNICATION),  # RCCL
    ("mscclKernel_Sum_float_LL(int, int, mscclAlgo*, mscclWork*)", C.COMMUNICATION),
    ("c10d::allreduce_", C.COMMUNICATION), ("record_param_comms", C.COMMUNICATION),
    ("nccl:all_reduce", C.COMMUNICATION), ("gloo:all_reduce", C.COMMUNICATION),
    ("gloo:broadcast", C.COMMUNICATION), ("c10d::broadcast_", C.COMMUNICATION),
    # DDP's bucket copies (torch 2.13, gloo): into the bucket scaled by 1/world, back to .grad
    ("torch::distributed::reducer::mul_out", C.ELEMENTWISE),
    ("torch.distributed.ddp.reducer::copy_bucket_to_grad", C.DATA_MOVEMENT),
    # AMD
    (k.TENSILE_HHS, C.GEMM), (k.TENSILE_BATCHED, C.GEMM), (k.CK_GEMM, C.GEMM),
    ("Custom_Cijk_Alik_Bljk_BBS_BH_Bias_HA_S_SAV_UserArgs_MT256x256x64_MI16x16x1", C.GEMM),
    ("void rocblas_gemvt_kernel<false, 256, int, float, float const*, float*>(...)", C.GEMM),
    # memory operations
    (k.MEMCPY_H2D, C.DATA_MOVEMENT), (k.MEMCPY_D2H, C.DATA_MOVEMENT),
    (k.MEMCPY_D2D, C.DATA_MOVEMENT), (k.MEMSET, C.DATA_MOVEMENT),
    (k.ROCM_H2D, C.DATA_MOVEMENT), (k.ROCM_D2H, C.DATA_MOVEMENT),
    (k.ROCCLR_FILL, C.DATA_MOVEMENT),
]


@pytest.mark.parametrize(("name", "category"), CASES, ids=[n[:60] for n, _ in CASES])
def test_kernel_names_classify(name: str, category: Category) -> None:
    assert Classifier()(name) is category


@pytest.mark.parametrize("name", [
    "my_custom_kernel", "Kernel2", "void cutlass::Kernel2<MyThing>(MyThing::Params)",
    "gemm", "at_native_gemm", "triton__0d1d2de",
])
def test_unknown_or_ambiguous_names_match_nothing(name: str) -> None:
    # bare "Kernel2" and old-style "triton__0d1d2de" carry no category: they stay unknown
    c = Classifier()
    assert not any(p.regex.search(name) for p in c.patterns), name


def test_every_gpu_pattern_has_a_real_name_here() -> None:
    c = Classifier()
    decided = set()
    for name, _ in CASES:
        hit = c.match(name)
        if hit in c.patterns:  # not an Inductor kernel (classified by its fused ops)
            decided.add(c.patterns.index(hit))
    gpu = [i for i, p in enumerate(builtin_patterns()) if not p.regex.pattern.startswith(_CPU)]
    assert len(gpu) > 30
    missing = [builtin_patterns()[i].regex.pattern for i in gpu if i not in decided]
    assert not missing, missing


_CPU = ("^aten::", "^fbgemm::", "^(torch::autograd", "^[A-Z]", "^torch::distributed",
        "^torch\\.distributed")
"""How the rows of CPU-op names (ATen, FBGEMM, autograd nodes, DDP) start."""


def test_aten_patterns_still_come_first() -> None:
    # the GPU section was appended: the profiler's ATen names decide as before
    pats = builtin_patterns()
    first_gpu = next(i for i, p in enumerate(pats) if not p.regex.pattern.startswith(_CPU))
    assert all(not p.regex.pattern.startswith("^aten::") for p in pats[first_gpu:])


def test_every_op_the_gemm_registry_sizes_classifies_as_a_gemm() -> None:
    # the registry (shapes) and the pattern table (categories) name the same ATen GEMMs
    from bertscope.trace.gemm_ops import GEMM_OPS

    classify = Classifier()
    assert {op: classify(op).is_gemm for op in GEMM_OPS} == dict.fromkeys(GEMM_OPS, True)


def test_every_built_in_regex_compiles() -> None:
    # the built-in tables compile their rows where first reached (start-up), so a broken
    # row would only show on a trace that reaches it: compile them all here
    import re

    from bertscope.trace.modules import builtin_modules

    table = builtin_modules()
    regexes = [p.regex for p in builtin_patterns()] + [r.regex for r in table.rows] + [
        r for r, _ in table.kinds] + [table.layer_class, table.dotted]
    assert len(regexes) > 100
    for r in regexes:
        assert r.compiled.pattern == r.pattern and isinstance(r.compiled, re.Pattern)


def test_a_users_bad_regex_is_refused_where_the_file_is_read(tmp_path: object) -> None:
    from pathlib import Path

    from bertscope.errors import BertscopeError
    from bertscope.taxonomy import load_patterns

    path = Path(str(tmp_path)) / "p.toml"
    path.write_text('[[pattern]]\nregex = "ok"\ncategory = "gemm"\n'
                    '[[pattern]]\nregex = "(unclosed"\ncategory = "gemm"\n')
    with pytest.raises(BertscopeError, match="pattern 2: bad regex"):
        load_patterns(path)
