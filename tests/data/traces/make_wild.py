"""Write the "traces from the wild" fixtures in `wild/` (run it to regenerate them).

    .venv/bin/python tests/data/traces/make_wild.py

Small Kineto-style CUDA training steps of the workloads a Transformer-only reader misses,
laid out as torch.profiler writes them (see `make_traces.Trace`: CPU ops with External id and
Sequence number, runtime launches with correlation ids and `ac2g` flows, kernels on streams;
backward nodes on the autograd thread, linked to their forward ops by sequence number and
`fwdbwd` flows). Kernel names are spelled as real traces of each library spell them.

- cnn_train.json.gz: a ResNet-style block (cuDNN/CUTLASS convolutions, with and without a
  fused `relu` in the name; cuDNN and native batch norm; ReLU; max pool; the FC layer).
- dlrm_train.json.gz: a DLRM-style step (FBGEMM table-batched embeddings forward and backward
  with the fused optimizer, permute_pooled_embs, bottom/top MLPs on cuBLASLt with epilogue
  kernels).
- magma_solve.json.gz: torch.linalg on the GPU (MAGMA GEMMs and factorizations) in a step.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parents[3]))  # the repository root, run as a script
from tests.data.traces.make_traces import CUDNN_NCHW, SGEMM, Trace

HERE = Path(__file__).parent / "wild"

# --- cuDNN / CUTLASS convolutions -------------------------------------------------------------
CONV_FPROP = ("sm80_xmma_fprop_implicit_gemm_tf32f32_tf32f32_f32_nhwckrsc_nchw_tilesize128x128x16"
              "_stage4_warpsize2x2x1_g1_tensor16x8x8_kernel")
CONV_RELU = "ampere_scudnn_128x64_relu_interior_nn_v1"
CONV_WINOGRAD_RELU = "volta_scudnn_winograd_128x128_ldg1_ldg4_relu_tile148t_nt_v1"
CONV_IMPLICIT = ("void implicit_convolve_sgemm<float, float, 128, 5, 5, 3, 3, 3, 1, false, false, "
                 "true>(int, int, int, float const*, int, float*, float const*, "
                 "kernel_conv_params, unsigned long long, int, float, float, int, float const*, "
                 "float const*, bool, int, int)")
CONV_DGRAD = ("sm80_xmma_dgrad_implicit_gemm_tf32f32_tf32f32_f32_nhwckrsc_nchw_tilesize64x32x64_"
              "stage5_warpsize2x2x1_g1_tensor16x8x8_kernel")
CONV_DGRAD_ENGINE = ("void cudnn::detail::dgrad_engine<float, 128, 6, 7, 3, 3, 5, false>(int, "
                     "int, int, float const*, int, float const*, int, float*, "
                     "kernel_grad_params, unsigned long long, int, unsigned long long, int, "
                     "float, int, int, int)")
CONV_WGRAD = ("sm80_xmma_wgrad_implicit_gemm_indexed_wo_smem_tf32f32_tf32f32_f32_nhwckrsc_nhwc_"
              "tilesize128x16x32_stage4_warpsize4x1x1_g1_tensor16x8x8_kernel")
CONV_WGRAD_ENGINE = ("void cudnn::detail::wgrad_alg0_engine<float, 128, 6, 8, 3, 3, 5, false, "
                     "512>(int, int, int, float const*, int, float*, float const*, "
                     "kernel_grad_params, unsigned long long, int, float, int, int, int, int)")
WINOGRAD_WGRAD = ("void cudnn::winograd_nonfused::winogradWgradDelta4x4<float, float>(cudnn::"
                  "winograd_nonfused::WinogradDeltaParams<float, float>)")
SCALE_PACKED = ("void cudnn::ops::scalePackedTensor_kernel<float, float>(cudnnTensor4dStruct, "
                "float*, float)")
CUTLASS_FPROP = ("void cutlass::Kernel<cutlass_tensorop_s1688fprop_optimized_tf32_64x64_16x10_nhwc"
                 "_align4>(cutlass_tensorop_s1688fprop_optimized_tf32_64x64_16x10_nhwc_align4::"
                 "Params)")
CUTLASS_DGRAD = ("void cutlass::Kernel2<cutlass_80_tensorop_s16816dgrad_optimized_f16_128x128_32x3"
                 "_nhwc_align8>(cutlass_80_tensorop_s16816dgrad_optimized_f16_128x128_32x3_nhwc_"
                 "align8::Params)")
CUTLASS_WGRAD = ("void cutlass::Kernel2<cutlass_80_tensorop_f16_s16816wgrad_optimized_f16_128x128_"
                 "32x3_nhwc_align8>(cutlass_80_tensorop_f16_s16816wgrad_optimized_f16_128x128_"
                 "32x3_nhwc_align8::Params)")
# --- batch norm, ReLU, pooling ----------------------------------------------------------------
BN_FW = ("void cudnn::bn_fw_tr_1C11_kernel_NCHW<float, float, int, 512, true, 1>("
         "cudnnTensorStruct, float const*, cudnnTensorStruct, float*, float const*, float const*, "
         "float, float, float*, float*, float*, float*, float, float)")
BN_BW = ("void cudnn::bn_bw_1C11_kernel_new<float, float, float2, 512, true, 1>(float, float, "
         "float, float, cudnnTensorStruct, float const*, cudnnTensorStruct, float const*, "
         "cudnnTensorStruct, float*, float const*, float*, float*, float const*, float const*, "
         "float)")
BN_STATS = ("void at::native::batch_norm_collect_statistics_kernel<at::native::InvStd, float, "
            "float, float, int>(at::GenericPackedTensorAccessor<float const, 3ul, at::"
            "RestrictPtrTraits, int>, float, float, at::GenericPackedTensorAccessor<float, 1ul, "
            "at::RestrictPtrTraits, int>, at::GenericPackedTensorAccessor<float, 1ul, at::"
            "RestrictPtrTraits, int>)")
BN_TRANSFORM = ("void at::native::batch_norm_transform_input_kernel<float, float, float, int, "
                "true>(at::GenericPackedTensorAccessor<float const, 3ul, at::RestrictPtrTraits, "
                "int>, at::GenericPackedTensorAccessor<float, 3ul, at::RestrictPtrTraits, int>, "
                "...)")
BN_BWD_REDUCE = ("void at::native::batch_norm_backward_reduce_kernel<float, float, float, int>("
                 "at::GenericPackedTensorAccessor<float const, 3ul, at::RestrictPtrTraits, int>,"
                 " ...)")
BN_BWD_ELEMT = ("void at::native::batch_norm_backward_elemt_kernel<float, float, float, int>("
                "at::GenericPackedTensorAccessor<float const, 3ul, at::RestrictPtrTraits, int>, "
                "...)")
CLAMP_MIN = ("void at::native::vectorized_elementwise_kernel<4, at::native::(anonymous namespace)"
             "::launch_clamp_scalar(at::TensorIteratorBase&, c10::Scalar, c10::Scalar, at::"
             "native::detail::ClampLimits)::{lambda()#1}::operator()() const::{lambda()#7}::"
             "operator()() const::{lambda(float)#1}, at::detail::Array<char*, 2> >(int, ...)")
THRESHOLD_BWD = ("void at::native::vectorized_elementwise_kernel<4, at::native::(anonymous "
                 "namespace)::threshold_kernel_impl<float>(at::TensorIteratorBase&, float, "
                 "float)::{lambda(float, float)#1}, at::detail::Array<char*, 3> >(int, ...)")
MAXPOOL = ("void at::native::(anonymous namespace)::max_pool_forward_nchw<float>(int, float "
           "const*, long, long, long, int, int, int, int, int, int, int, int, int, int, float*, "
           "long*)")
MAXPOOL_BWD = ("void at::native::(anonymous namespace)::max_pool_backward_nchw<float>(float "
               "const*, long const*, long, long, long, int, int, int, int, int, int, int, int, "
               "int, int, float*)")
# --- FBGEMM, cuBLASLt -------------------------------------------------------------------------
TBE_FWD = ("void split_embedding_codegen_forward_unweighted_kernel<float, float, float, long, 8ul,"
           " 4ul>(at::GenericPackedTensorAccessor<float, 1ul, at::RestrictPtrTraits, long>, ...)")
TBE_BWD_CTA = ("void split_embedding_backward_codegen_rowwise_adagrad_unweighted_kernel_cta_per_"
               "row_1<float, float, float, long, 8ul, 4ul>(at::GenericPackedTensorAccessor"
               "<float, 2ul, at::RestrictPtrTraits, long>, ...)")
TBE_BWD_WARP = ("void split_embedding_backward_codegen_rowwise_adagrad_unweighted_kernel_warp_per"
                "_row_1<float, float, float, long, 8ul, 4ul>(at::GenericPackedTensorAccessor"
                "<float, 2ul, at::RestrictPtrTraits, long>, ...)")
LINEARIZE = ("void linearize_index_kernel<long, long>(at::GenericPackedTensorAccessor<long const,"
             " 1ul, at::RestrictPtrTraits, int>, ...)")
BOUNDS_CHECK = ("void bounds_check_indices_kernel<long>(at::GenericPackedTensorAccessor<long, "
                "1ul, at::RestrictPtrTraits, long>, ...)")
RADIX_SORT = ("void at_cuda_detail::cub::DeviceRadixSortOnesweepKernel<at_cuda_detail::cub::"
              "DeviceRadixSortPolicy<long, int, int>::Policy800, false, long, int, int, int>(...)")
PERMUTE_POOLED = ("void fbgemm_gpu::permute_pooled_embs_kernel<float>(float const*, long const*, "
                  "long const*, long const*, float*, long, long, long)")
LT_GEMM = ("sm80_xmma_gemm_f32f32_tf32f32_f32_tn_n_tilesize128x128x16_stage4_warpsize2x2x1_tensor"
           "16x8x8_execute_kernel__5x_cublas")
LT_EPILOGUE = ("void cublasLt::epilogue::impl::globalKernel<8, 32, float, float, float, true, "
               "false, true, false, false>(int, int, long, float*, long, float const*, long, "
               "float*, long, float const*, float const*, long, void*, long, float*, float*)")
LT_SPLITK = ("void cublasLt::splitKreduce_kernel<32, 16, int, float, float, float, float, false, "
             "true, false, false>(cublasLt::cublasSplitKParams<float>, float const*, float "
             "const*, float*, float const*, float const*, float const*, float const*, float*, "
             "void*, long, float*, int*)")
BAG_FWD = ("void at::native::(anonymous namespace)::EmbeddingBag_updateOutputKernel_sum_mean"
           "<float, long>(long const*, long const*, float const*, float*, long*, long, long, "
           "long, long, long, float const*, long)")
BAG_GRAD = ("void at::native::(anonymous namespace)::compute_grad_weight_bags<float, long>(long "
            "const*, float const*, long const*, long const*, long const*, long, long, long, "
            "long const*, long const*, long const*, float*, long, long)")
BAG_SCATTER = ("void at::native::(anonymous namespace)::sum_and_scatter<float, long>(long "
               "const*, float*, long, long const*, float const*, long const*, long const*, "
               "long, long)")
DOT = ("void dot_kernel<float, 128, 0, cublasDotParams<cublasGemvTensor<float const>, "
       "cublasGemvTensor<float> > >(cublasDotParams<cublasGemvTensor<float const>, "
       "cublasGemvTensor<float> >)")
# --- MAGMA ------------------------------------------------------------------------------------
MAGMA_GEMM = ("void magma_lds128_sgemm_kernel<false, false, 5, 5, 3, 3, 3>(int, int, int, float "
              "const*, int, float const*, int, float*, int, int, int, float const*, float const*,"
              " float, float, int)")
MAGMA_GEMM_BATCHED = ("void sgemm_template_batched_nn_kernel<float, 16, 16, 32, 16, 16, 16, 16, 16,"
                      " 0, 0>(int, int, int, float const* const*, int, float const* const*, int, "
                      "float**, int, float, float, int, int, int, int, int)")
MAGMA_GETRF = ("void getrf_batched_smallsq_noshfl_kernel<float, 16, 16>(int, float**, int, int, "
               "int, int, int**, int, int*, int)")
MAGMA_POTF2 = "void magma_spotf2_smlpout_fixwidth_kernel_batched(int, float**, int, int, int*, int)"
MAGMA_LASWP = "void laswp_rowparallel_kernel(int, int, float*, int, int, int, int const*)"
MAGMA_TRSM = ("void trsm_template_batched_nn_kernel<float, 16, 16>(magma_side_t, magma_uplo_t, "
              "int, int, float, float**, int, float**, int, int, int, int, int)")

_BWD = 2  # the autograd engine's thread (tid), as CUDA traces have it


def _fwdbwd(tr: Trace, seq: int, fwd: dict, bwd: dict) -> None:
    """The `fwdbwd` flow Kineto writes from a forward op to its backward node."""
    for ph, ev in (("s", fwd), ("f", bwd)):
        flow = {"ph": ph, "id": seq, "pid": ev["pid"], "tid": ev["tid"], "ts": ev["ts"],
                "cat": "fwdbwd", "name": "fwdbwd"}
        if ph == "f":
            flow["bp"] = "e"
        tr.events.append(flow)


def _backward(tr: Trace, node: str, seq: int, fwd: dict, op: str,
              kernels: list[tuple[str, float]], dims: list | None = None) -> None:
    """A backward node on the autograd thread running `op` with `kernels`."""
    with tr.op(f"autograd::engine::evaluate_function: {node}", tid=_BWD, seq=seq,
               fwd=False) as b, tr.op(node, tid=_BWD, seq=seq, fwd=False), \
            tr.op(op, tid=_BWD, dims=dims):
        for name, dur in kernels:
            tr.kernel(name, dur, tid=_BWD)
    _fwdbwd(tr, seq, fwd, b)


def cnn_train() -> Trace:
    """A conv -> batch norm -> ReLU -> max pool -> conv (CUTLASS) -> FC training step."""
    tr = Trace(pid=700, tid=700)
    x, w = [8, 3, 32, 32], [16, 3, 3, 3]
    with tr.ann("ProfilerStep#3"):
        with tr.op("aten::conv2d", dims=[x, w, [16]], seq=1) as c1, \
                tr.op("aten::convolution", dims=[x, w, [16]]), \
                tr.op("aten::_convolution", dims=[x, w, [16]]), \
                tr.op("aten::cudnn_convolution", dims=[x, w]):
            tr.kernel(CUDNN_NCHW, 2.0)
            tr.kernel(CONV_FPROP, 40.0)
            tr.kernel(CONV_RELU, 30.0)  # cuDNN picked a kernel with "relu" in its name
        with tr.op("aten::batch_norm", dims=[[8, 16, 32, 32]], seq=2) as b1, \
                tr.op("aten::_batch_norm_impl_index", dims=[[8, 16, 32, 32]]), \
                tr.op("aten::cudnn_batch_norm", dims=[[8, 16, 32, 32]]):
            tr.kernel(BN_FW, 12.0)
        with tr.op("aten::relu_", dims=[[8, 16, 32, 32]], seq=3) as r1, \
                tr.op("aten::clamp_min_", dims=[[8, 16, 32, 32]]):
            tr.kernel(CLAMP_MIN, 5.0)
        with tr.op("aten::max_pool2d", dims=[[8, 16, 32, 32]], seq=4) as p1, \
                tr.op("aten::max_pool2d_with_indices", dims=[[8, 16, 32, 32]]):
            tr.kernel(MAXPOOL, 6.0)
        with tr.op("aten::conv2d", dims=[[8, 16, 16, 16], [16, 16, 3, 3]], seq=5) as c2, \
                tr.op("aten::convolution", dims=[[8, 16, 16, 16], [16, 16, 3, 3]]):
            tr.kernel(CUTLASS_FPROP, 25.0)
            tr.kernel(CONV_WINOGRAD_RELU, 15.0)
            tr.kernel(CONV_IMPLICIT, 10.0)
        with tr.op("aten::batch_norm", dims=[[8, 16, 16, 16]], seq=6) as b2, \
                tr.op("aten::native_batch_norm", dims=[[8, 16, 16, 16]]):
            tr.kernel(BN_STATS, 4.0)
            tr.kernel(BN_TRANSFORM, 3.0)
        with tr.op("aten::linear", dims=[[8, 4096], [10, 4096], [10]], seq=7) as fc, \
                tr.op("aten::addmm", dims=[[10], [8, 4096], [4096, 10], [], []]):
            tr.kernel(SGEMM, 8.0)
        tr.t += 2
        _backward(tr, "AddmmBackward0", 7, fc, "aten::mm", [(SGEMM, 8.0)],
                  dims=[[8, 10], [10, 4096]])
        _backward(tr, "NativeBatchNormBackward0", 6, b2, "aten::native_batch_norm_backward",
                  [(BN_BWD_REDUCE, 4.0), (BN_BWD_ELEMT, 4.0)])
        _backward(tr, "ConvolutionBackward0", 5, c2, "aten::convolution_backward",
                  [(CUTLASS_DGRAD, 20.0), (CUTLASS_WGRAD, 22.0), (SCALE_PACKED, 1.0)])
        _backward(tr, "MaxPool2DWithIndicesBackward0", 4, p1,
                  "aten::max_pool2d_with_indices_backward", [(MAXPOOL_BWD, 6.0)])
        _backward(tr, "ReluBackward0", 3, r1, "aten::threshold_backward",
                  [(THRESHOLD_BWD, 5.0)])
        _backward(tr, "CudnnBatchNormBackward0", 2, b1, "aten::cudnn_batch_norm_backward",
                  [(BN_BW, 14.0)])
        _backward(tr, "ConvolutionBackward0", 1, c1, "aten::convolution_backward",
                  [(CONV_DGRAD, 35.0), (CONV_DGRAD_ENGINE, 5.0), (CONV_WGRAD, 38.0),
                   (CONV_WGRAD_ENGINE, 6.0), (WINOGRAD_WGRAD, 4.0)])
        tr.t = max(tr.t, max(tr.stream_clock.values()) + 1)
    return tr


def dlrm_train() -> Trace:
    """FBGEMM table-batched embeddings, permute_pooled_embs, MLPs with cuBLASLt epilogues."""
    tr = Trace(pid=800, tid=800)
    with tr.ann("ProfilerStep#1"):
        with tr.op("aten::linear", dims=[[64, 13], [32, 13], [32]], seq=1) as mlp, \
                tr.op("aten::addmm", dims=[[32], [64, 13], [13, 32], [], []]):
            tr.kernel(LT_GEMM, 6.0)
            tr.kernel(LT_EPILOGUE, 2.0)
        with tr.op("fbgemm::split_embedding_codegen_lookup_rowwise_adagrad_function",
                   dims=[[4096], [65]], seq=2) as tbe:
            tr.kernel(BOUNDS_CHECK, 2.0)
            tr.kernel(TBE_FWD, 30.0)
        with tr.op("aten::embedding_bag", dims=[[1000, 32], [640], [64]], seq=6) as bag, \
                tr.op("aten::_embedding_bag", dims=[[1000, 32], [640], [64]]):
            tr.kernel(BAG_FWD, 5.0)
        with tr.op("fbgemm::permute_pooled_embs_auto_grad", dims=[[64, 128]], seq=3) as perm:
            tr.kernel(PERMUTE_POOLED, 3.0)
        with tr.op("aten::bmm", dims=[[64, 5, 32], [64, 32, 5]], seq=4) as inter:
            tr.kernel(SGEMM, 4.0)
            tr.kernel(DOT, 1.0)
        with tr.op("aten::linear", dims=[[64, 42], [1, 42], [1]], seq=5) as top, \
                tr.op("aten::addmm", dims=[[1], [64, 42], [42, 1], [], []]):
            tr.kernel(LT_GEMM, 3.0)
            tr.kernel(LT_SPLITK, 1.0)
        tr.t += 2
        _backward(tr, "AddmmBackward0", 5, top, "aten::mm", [(LT_GEMM, 3.0), (LT_EPILOGUE, 1.0)],
                  dims=[[64, 1], [1, 42]])
        _backward(tr, "BmmBackward0", 4, inter, "aten::bmm", [(SGEMM, 4.0)],
                  dims=[[64, 5, 5], [64, 5, 32]])
        _backward(tr, "EmbeddingBagBackward0", 6, bag, "aten::_embedding_bag_backward",
                  [(RADIX_SORT, 2.0), (BAG_GRAD, 4.0), (BAG_SCATTER, 1.0)])
        _backward(tr, "PermutePooledEmbsFunctionBackward", 3, perm,
                  "fbgemm::permute_pooled_embs", [(PERMUTE_POOLED, 3.0)], dims=[[64, 128]])
        _backward(tr, "SplitLookupFunction_rowwise_adagrad_OpBackward", 2, tbe,
                  "fbgemm::split_embedding_backward_codegen_rowwise_adagrad_unweighted_exact_cuda",
                  [(LINEARIZE, 2.0), (RADIX_SORT, 3.0), (TBE_BWD_CTA, 20.0),
                   (TBE_BWD_WARP, 25.0)])
        _backward(tr, "AddmmBackward0", 1, mlp, "aten::mm", [(LT_GEMM, 5.0)],
                  dims=[[32, 64], [64, 13]])
        tr.t = max(tr.t, max(tr.stream_clock.values()) + 1)
    return tr


def magma_solve() -> Trace:
    """torch.linalg.solve and cholesky on the GPU: MAGMA kernels under linalg ops."""
    tr = Trace(pid=900, tid=900)
    with tr.ann("ProfilerStep#1"):
        with tr.op("aten::linalg_solve", dims=[[16, 32, 32], [16, 32, 4]], seq=1), \
                tr.op("aten::linalg_solve_ex", dims=[[16, 32, 32], [16, 32, 4]]), \
                tr.op("aten::_linalg_solve_ex", dims=[[16, 32, 32], [16, 32, 4]]):
            tr.kernel(MAGMA_GETRF, 12.0)
            tr.kernel(MAGMA_LASWP, 2.0)
            tr.kernel(MAGMA_TRSM, 6.0)
            tr.kernel(MAGMA_GEMM_BATCHED, 5.0)
        with tr.op("aten::linalg_cholesky", dims=[[16, 32, 32]], seq=2), \
                tr.op("aten::linalg_cholesky_ex", dims=[[16, 32, 32]]):
            tr.kernel(MAGMA_POTF2, 9.0)
            tr.kernel(MAGMA_GEMM, 7.0)
        tr.t = max(tr.t, max(tr.stream_clock.values()) + 1)
    return tr


FIXTURES = {"cnn_train.json.gz": cnn_train, "dlrm_train.json.gz": dlrm_train,
            "magma_solve.json.gz": magma_solve}


def main(out: Path = HERE) -> None:
    """Write every fixture into `out`."""
    for name, make in FIXTURES.items():
        make().write(out / name)


if __name__ == "__main__":
    main()
