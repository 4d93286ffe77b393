"""Write the small Kineto-style fixture traces in this folder (run it to regenerate them).

    .venv/bin/python tests/data/traces/make_traces.py

Each trace is laid out the way torch.profiler writes CUDA/ROCm traces: CPU ops nested on
a thread, runtime launches (cudaLaunchKernel, cuLaunchKernel, hipLaunchKernel) with a
`correlation` arg, the kernels on a device's streams with the same correlation, and `ac2g`
flow events between them. Kernel names are copied from real traces of each family.

- cuda_bert_train.json.gz: a `bertscope profile`-style CUDA training step (module scopes,
  phases, backward on the autograd thread, DDP all-reduce overlapping backward, fused
  AdamW), rank 0 of 2 in distributedInfo.
- rocm_infer.json.gz: ROCm inference: Tensile/CK GEMMs, hipLaunchKernel, no rank, no
  ProfilerStep, no correlation args (only ac2g flows link launches to kernels).
- triton_compiled.json.gz: torch.compile training, two ProfilerStep#N iterations: Triton
  kernels of every kind, fused attention, cuDNN, fused SGD.
- multirank/: two ranks (one named by distributedInfo, one by its file name) with LAMB,
  NCCL variants, GEMV/split-K, apex and Megatron kernels, GEMM look-alikes, older Kineto
  category spellings and B/E event pairs.
"""

from __future__ import annotations

import contextlib
import gzip
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

HERE = Path(__file__).parent
BASE = 5_195_363_719_572.125
"""Kineto-sized timestamps (us), so float precision is exercised."""

# --- kernel names, as real traces spell them ---------------------------------------------------
SGEMM = "ampere_sgemm_128x64_tn"
SGEMM_NN = "ampere_sgemm_64x32_sliced1x4_nn"
XMMA_SM90 = ("sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64_warpgroupsize1x1x1_"
             "execute_segment_k_off_kernel__5x_cublas")
XMMA_SM80 = ("sm80_xmma_gemm_f32f32_f32f32_f32_nn_n_tilesize64x64x8_stage3_warpsize1x2x1_ffma_"
             "aligna4_alignc4_execute_kernel__5x_cublas")
NVJET = "nvjet_tst_128x256_64x4_1x2_h_bz_coopA_NTN"
CUTLASS = "cutlass_80_tensorop_bf16_s16816gemm_relu_bf16_64x64_32x6_tn_align8"
CUTLASS_WMMA = ("void cutlass::Kernel<cutlass_80_wmma_tensorop_bf16_s161616gemm_bf16_32x32_128x2_"
                "tn_align8>(cutlass_80_wmma_tensorop_bf16_s161616gemm_bf16_32x32_128x2_tn_align8"
                "::Params)")
CUTLASS_K2 = ("void cutlass::Kernel2<cutlass_80_tensorop_s1688gemm_64x64_32x6_tn_align4>("
              "cutlass_80_tensorop_s1688gemm_64x64_32x6_tn_align4::Params)")
SPLITK = ("void splitKreduce_kernel<32, 16, int, float, float, float, float, true, false, false>"
          "(cublasSplitKParams<float>, float const*, float const*, float*, float const*, "
          "float const*, float const*, float const*, float*, void*, long, float*, int*)")
GEMMSN = ("void gemmSN_TN_kernel<float, 128, 16, 2, 4, 4, 4, true, cublasGemvTensorStridedBatched"
          "<float const>, cublasGemvTensorStridedBatched<float const>, "
          "cublasGemvTensorStridedBatched<float> >(cublasGemmSmallNParams<"
          "cublasGemvTensorStridedBatched<float const>, cublasGemvTensorStridedBatched<float const>"
          ", cublasGemvTensorStridedBatched<float>, float>)")
ADD = ("void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<float>, "
       "at::detail::Array<char*, 3> >(int, at::native::CUDAFunctor_add<float>, "
       "at::detail::Array<char*, 3>)")
MUL = ("void at::native::vectorized_elementwise_kernel<4, at::native::BinaryFunctor<float, float, "
       "float, at::native::binary_internal::MulFunctor<float> >, at::detail::Array<char*, 3> >("
       "int, at::native::BinaryFunctor<float, float, float, at::native::binary_internal::"
       "MulFunctor<float> >, at::detail::Array<char*, 3>)")
FILL = ("void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<float>, "
        "at::detail::Array<char*, 1> >(int, at::native::FillFunctor<float>, "
        "at::detail::Array<char*, 1>)")
COPY = ("void at::native::unrolled_elementwise_kernel<at::native::direct_copy_kernel_cuda("
        "at::TensorIteratorBase&)::{lambda()#3}::operator()() const::{lambda()#7}::operator()() "
        "const::{lambda(float)#1}, at::detail::Array<char*, 2>, TrivialOffsetCalculator<1, "
        "unsigned int>, TrivialOffsetCalculator<1, unsigned int>, at::native::memory::"
        "LoadWithCast<1>, at::native::memory::StoreWithCast<1> >(int, at::native::"
        "direct_copy_kernel_cuda(at::TensorIteratorBase&)::{lambda()#3}::operator()() const::"
        "{lambda()#7}::operator()() const::{lambda(float)#1}, at::detail::Array<char*, 2>, "
        "TrivialOffsetCalculator<1, unsigned int>, TrivialOffsetCalculator<1, unsigned int>, "
        "at::native::memory::LoadWithCast<1>, at::native::memory::StoreWithCast<1>)")
GELU = ("void at::native::vectorized_elementwise_kernel<4, at::native::GeluCUDAKernelImpl("
        "at::TensorIteratorBase&, at::native::GeluType)::{lambda()#2}::operator()() const::"
        "{lambda()#2}::operator()() const::{lambda(float)#1}, at::detail::Array<char*, 2> >(int, "
        "at::native::GeluCUDAKernelImpl(at::TensorIteratorBase&, at::native::GeluType)::"
        "{lambda()#2}::operator()() const::{lambda()#2}::operator()() const::{lambda(float)#1}, "
        "at::detail::Array<char*, 2>)")
GELU_BWD = ("void at::native::vectorized_elementwise_kernel<4, at::native::"
            "GeluBackwardCUDAKernelImpl(at::TensorIteratorBase&, at::native::GeluType)::"
            "{lambda()#2}::operator()() const::{lambda()#2}::operator()() const::"
            "{lambda(float, float)#1}, at::detail::Array<char*, 3> >(int, at::native::"
            "GeluBackwardCUDAKernelImpl(at::TensorIteratorBase&, at::native::GeluType)::"
            "{lambda()#2}::operator()() const::{lambda()#2}::operator()() const::"
            "{lambda(float, float)#1}, at::detail::Array<char*, 3>)")
LN = ("void at::native::(anonymous namespace)::vectorized_layer_norm_kernel<float, float>(int, "
      "float, float const*, float const*, float const*, float*, float*, float*)")
LN_BWD_IN = ("void at::native::(anonymous namespace)::layer_norm_grad_input_kernel<float, float>("
             "float const*, float const*, float const*, float const*, float const*, float*, int)")
LN_BWD_GB = ("void at::native::(anonymous namespace)::GammaBetaBackwardCUDAKernel<float, float>("
             "long, long, float const*, float const*, float const*, float const*, float*, float*)")
SOFTMAX = ("void at::native::(anonymous namespace)::cunn_SoftMaxForward<4, float, float, float, "
           "at::native::(anonymous namespace)::SoftMaxForwardEpilogue>(float*, float const*, int)")
SOFTMAX_BWD = ("void at::native::(anonymous namespace)::cunn_SoftMaxBackward<4, float, float, "
               "float, at::native::(anonymous namespace)::SoftMaxBackwardEpilogue>(float*, "
               "float const*, float const*, long)")
LOGSOFTMAX = ("void at::native::(anonymous namespace)::cunn_SoftMaxForward<4, float, float, "
              "float, at::native::(anonymous namespace)::LogSoftMaxForwardEpilogue>(float*, "
              "float const*, int)")
WARP_LOGSOFTMAX_BWD = ("void (anonymous namespace)::softmax_warp_backward<float, float, float, "
                       "10, true, false>(float*, float const*, float const*, int, int, int, "
                       "bool const*)")
WARP_SOFTMAX = ("void (anonymous namespace)::softmax_warp_forward<c10::Half, c10::Half, float, 7,"
                " false, false>(c10::Half*, c10::Half const*, int, int, int, bool const*, int, "
                "bool)")
NLL = ("void at::native::(anonymous namespace)::nll_loss_forward_reduce_cuda_kernel_2d<float, "
       "float, long>(float*, float*, float const*, long const*, float const*, bool, long, long, "
       "long, long)")
NLL_BWD = ("void at::native::(anonymous namespace)::nll_loss_backward_reduce_cuda_kernel_2d<float,"
           " long>(float*, float const*, long const*, float const*, float const*, bool, int, int,"
           " long, long)")
DROPOUT = ("void at::native::(anonymous namespace)::fused_dropout_kernel_vec<float, float, "
           "unsigned int, 1, 4, bool>(at::cuda::detail::TensorInfo<float const, unsigned int>, "
           "at::cuda::detail::TensorInfo<float, unsigned int>, at::cuda::detail::TensorInfo<bool,"
           " unsigned int>, unsigned int, float, at::PhiloxCudaState)")
DROPOUT_BWD = ("void at::native::(anonymous namespace)::masked_scale_kernel<bool, float, float>("
               "at::Tensor&, at::Tensor const&, at::Tensor const&, float)::{lambda(float, bool)#1}")
REDUCE_SUM = ("void at::native::reduce_kernel<512, 1, at::native::ReduceOp<float, at::native::"
              "func_wrapper_t<float, at::native::sum_functor<float, float, float>::operator()("
              "at::TensorIterator&)::{lambda(float, float)#1}>, unsigned int, float, 4> >("
              "at::native::ReduceOp<float, at::native::func_wrapper_t<float, at::native::"
              "sum_functor<float, float, float>::operator()(at::TensorIterator&)::"
              "{lambda(float, float)#1}>, unsigned int, float, 4>)")
INDEX_SELECT = ("void at::native::(anonymous namespace)::indexSelectLargeIndex<float, long, "
                "unsigned int, 2, 2, -2, true>(at::cuda::detail::TensorInfo<float, unsigned int>,"
                " at::cuda::detail::TensorInfo<float const, unsigned int>, at::cuda::detail::"
                "TensorInfo<long const, unsigned int>, int, int, unsigned int, unsigned int, long)")
EMB_BWD = ("void at::native::(anonymous namespace)::embedding_backward_feature_kernel<float, "
           "float, long>(long const*, float const*, float*, int, long, int, int)")
FUSED_ADAMW = ("void at::native::(anonymous namespace)::multi_tensor_apply_kernel<at::native::"
               "(anonymous namespace)::FusedOptimizerTensorListMetadata<4>, at::native::"
               "(anonymous namespace)::FusedAdamMathFunctor<float, 4, (at::native::ADAM_MODE)1, "
               "false>, float*, double, double, double, double, double, double, bool, float*, "
               "float*>(at::native::(anonymous namespace)::FusedOptimizerTensorListMetadata<4>, "
               "at::native::(anonymous namespace)::FusedAdamMathFunctor<float, 4, (at::native::"
               "ADAM_MODE)1, false>, float*, double, double, double, double, double, double, "
               "bool, float*, float*)")
LPNORM = ("void at::native::(anonymous namespace)::multi_tensor_apply_kernel<at::native::"
          "(anonymous namespace)::TensorListMetadata<1>, at::native::(anonymous namespace)::"
          "LpNormFunctor<float, (at::native::(anonymous namespace)::NormType)1, float, float>, "
          "float*, int>(at::native::(anonymous namespace)::TensorListMetadata<1>, at::native::"
          "(anonymous namespace)::LpNormFunctor<float, (at::native::(anonymous namespace)::"
          "NormType)1, float, float>, float*, int)")
FOREACH_MUL = ("void at::native::(anonymous namespace)::multi_tensor_apply_kernel<at::native::"
               "(anonymous namespace)::TensorListMetadata<1>, at::native::(anonymous namespace)::"
               "BinaryOpScalarTensorFunctor<float, 1, 1, 0>, std::multiplies<float>, float*, "
               "float>(at::native::(anonymous namespace)::TensorListMetadata<1>, at::native::"
               "(anonymous namespace)::BinaryOpScalarTensorFunctor<float, 1, 1, 0>, "
               "std::multiplies<float>, float*, float)")
NCCL_AR = "ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevKernelArgsStorage<4096ul>)"
NCCL_AR_OLD = "ncclKernel_AllReduce_RING_LL_Sum_float(ncclWorkElem)"
NCCL_RS = "ncclDevKernel_ReduceScatter_Sum_bf16_RING_LL(ncclDevKernelArgsStorage<4096ul>)"
NCCL_AG = "ncclDevKernel_AllGather_RING_LL(ncclDevKernelArgsStorage<4096ul>)"
MEMCPY_H2D = "Memcpy HtoD (Pageable -> Device)"
MEMCPY_D2H = "Memcpy DtoH (Device -> Pageable)"
MEMCPY_D2D = "Memcpy DtoD (Device -> Device)"
MEMSET = "Memset (Device)"

# ROCm
TENSILE_HHS = ("Cijk_Alik_Bljk_HHS_BH_MT128x128x32_MI32x32x8x1_SN_1LDSB0_APM1_ABV0_ACED0_AF0EM1_"
               "AF1EM1_AMAS3_ASE_ASGT_ASLT_ASAE01_ASCE01_ASEM1_AAC0_BL1_BS1_DTL0_DTVA0_DVO0_ETSP_"
               "EPS1_FL0_GRPM1_GRVW8_GSU1_GSUASB_GLS0_ISA90a_IU1_K1_KLA_LBSPPA0_LBSPPB0_LPA0_LPB8_"
               "LDL1_LRVW16_LWPMn1_LDW0_FMA_MIAV0_MDA2_MO40_NTA0_NTB0_NTC0_NTD0_NEPBS0_NLCA1_NLCB1"
               "_ONLL1_OPLV0_PK0_PAP0_PGR1_PLR1_SIA3_SS0_SU32_SUM0_SUS256_SCIUI1_SPO0_SRVW0_SSO0_"
               "SVW4_SNLL0_TT4_64_TLDS1_USFGROn1_VAW2_VSn1_VW4_WSGRA0_WSGRB0_WS64_WG32_4_1_WGM8")
TENSILE_BATCHED = ("Cijk_Ailk_Bljk_HHS_BH_MT64x64x64_MI16x16x16x1_SN_1LDSB1_AFC1_AFEM1_"
                   "AFEM1_ASEM1_CLR1_CADS0_EPS1_GRVW8_GSU1_ISA942_IU1_K1_LBSPPA128_LPA16_"
                   "LPB16_LRVW8_MIAV1_MIWT2_2_NTn1_NEPBS0_NLCA1_NLCB1_PGR2_PLR1_SIA3_SS1_"
                   "SPO0_SRVW0_SSO0_SVW8_TLDS1_ULSGRO0_USL1_UIOFGRO0_USFGROn1_VSn1_VWA1_"
                   "VWB1_WSGRA1_WSGRB1_WG32_8_1")
CK_GEMM = ("void ck::kernel_gemm_xdl_cshuffle_v3<ck::GridwiseGemm_xdl_cshuffle_v3<ck::tensor_"
           "layout::gemm::RowMajor, ck::tensor_layout::gemm::ColumnMajor, ck::tensor_layout::"
           "gemm::RowMajor, ck::half_t, ck::half_t, float, ck::half_t>, true, "
           "(ck::InMemoryDataOperationEnum)0, 1, (ck::TailNumber)1>(ck::GridwiseGemm_xdl_"
           "cshuffle_v3<ck::half_t>::Argument)")
CK_FMHA = ("void ck_tile::kentry<256, 2, ck_tile::FmhaFwdKernel<ck_tile::BlockFmhaPipelineQRKSVS"
           "Async<ck_tile::BlockFmhaPipelineProblem<ck_tile::half_t> >, ck_tile::"
           "Default2DEpilogue<ck_tile::half_t> > >(ck_tile::FmhaFwdKernel<...>::Kargs)")
LN_HALF = ("void at::native::(anonymous namespace)::vectorized_layer_norm_kernel<c10::Half, "
           "float>(int, float, c10::Half const*, c10::Half const*, c10::Half const*, float*, "
           "float*, c10::Half*)")
GELU_TANH_HALF = GELU.replace("(float)#1", "(c10::Half)#1")
ROCCLR_FILL = "__amd_rocclr_fillBufferAligned"
ROCM_H2D = "CopyHostToDevice"
ROCM_D2H = "CopyDeviceToHost"

# Triton / torch.compile
TRITON = {
    "gelu": "triton_poi_fused_gelu_0",
    "add": "triton_poi_fused_add_1",
    "to_copy": "triton_poi_fused__to_copy_2",
    "clone": "triton_poi_fused_clone_3",
    "softmax": "triton_red_fused__softmax_4",
    "layer_norm": "triton_per_fused_add_native_layer_norm_5",
    "layer_norm_bwd": "triton_per_fused_add_native_layer_norm_native_layer_norm_backward_6",
    "dropout": "triton_poi_fused_native_dropout_7",
    "nll": "triton_red_fused__log_softmax_nll_loss_forward_8",
    "embedding": "triton_poi_fused_embedding_9",
    "embedding_bwd": "triton_poi_fused_embedding_dense_backward_10",
    "sum": "triton_red_fused_sum_11",
    "per_sum": "triton_per_fused_sum_12",
    "tem_mm": "triton_tem_fused_mm_13",
    "tem_addmm": "triton_tem_fused_addmm_gelu_14",
    "tem_bmm": "triton_tem_fused_bmm_15",
    "foreach": "triton_for_fused_16",
    "gelu_bwd": "triton_poi_fused_gelu_gelu_backward_17",
}
FLASH_FWD = ("void pytorch_flash::flash_fwd_kernel<Flash_fwd_kernel_traits<64, 128, 128, 4, false,"
             " false, cutlass::bfloat16_t, Flash_kernel_traits<64, 128, 128, 4, cutlass::"
             "bfloat16_t> >, false, false, false, false, true, true, false, false>(pytorch_flash::"
             "Flash_fwd_params)")
FLASH_BWD = ("void pytorch_flash::flash_bwd_dq_dk_dv_loop_seqk_parallel_kernel<Flash_bwd_kernel_"
             "traits<64, 128, 128, 8, 2, 4, 2, false, false, cutlass::bfloat16_t, Flash_kernel_"
             "traits<64, 128, 128, 8, cutlass::bfloat16_t> >, false, false, false, false, false, "
             "true, false, false>(pytorch_flash::Flash_bwd_params)")
FMHA_CUTLASS_B = ("fmha_cutlassB_f16_aligned_128x64_k128_sm80(PyTorchMemEffAttention::"
                  "AttentionBackwardKernel<cutlass::arch::Sm80, cutlass::half_t, true, false, "
                  "true, 128, 64, 128, false>::Params)")
CUDNN_SDPA = ("cudnn_generated_fort_native_sdpa_sm90_flash_fprop_wgmma_f16_knob_3_64x64x64_4x1x1_"
              "kernel0_0")
CUDNN_CONV = ("sm80_xmma_fprop_implicit_gemm_bf16bf16_bf16f32_f32_nhwckrsc_nhwc_tilesize128x128x32"
              "_stage4_warpsize2x2x1_g1_tensor16x8x16_execute_kernel__5x_cudnn")
CUDNN_NCHW = ("void cudnn::engines_precompiled::nchwToNhwcKernel<__nv_bfloat16, __nv_bfloat16, "
              "float, false, true, (cudnnKernelDataType_t)2>(cudnn::engines_precompiled::"
              "nchw2nhwc_params_t<float>, __nv_bfloat16 const*, __nv_bfloat16*)")
FUSED_SGD = ("void at::native::(anonymous namespace)::multi_tensor_apply_kernel<at::native::"
             "(anonymous namespace)::FusedOptimizerTensorListMetadata<3>, at::native::"
             "(anonymous namespace)::FusedSgdMathFunctor<float, 3>, double, double, double, bool,"
             " bool, bool, float*, float*, float const*>(at::native::(anonymous namespace)::"
             "FusedOptimizerTensorListMetadata<3>, at::native::(anonymous namespace)::"
             "FusedSgdMathFunctor<float, 3>, double, double, double, bool, bool, bool, float*, "
             "float*, float const*)")

# multirank: apex LAMB, Megatron softmax, GEMV, look-alikes
LAMB1 = ("void multi_tensor_apply_kernel<TensorListMetadata<4>, LAMBStage1Functor<float, float>, "
         "float, float, float, float, float, float const*, adamMode_t, float, float*>("
         "long, int volatile*, TensorListMetadata<4>, LAMBStage1Functor<float, float>, float, "
         "float, float, float, float, float const*, adamMode_t, float, float*)")
LAMB2 = ("void multi_tensor_apply_kernel<TensorListMetadata<2>, LAMBStage2Functor<float, float>, "
         "float*, float, float, bool>(long, int volatile*, TensorListMetadata<2>, "
         "LAMBStage2Functor<float, float>, float*, float, float, bool)")
L2NORM = ("void multi_tensor_apply_kernel<TensorListMetadata<1>, L2NormFunctor<float, 512, 1>, "
          "float*, float*, bool, int>(long, int volatile*, TensorListMetadata<1>, L2NormFunctor"
          "<float, 512, 1>, float*, float*, bool, int)")
APEX_LN = ("void cuApplyLayerNorm<float, float, float>(float*, float*, float*, float const*, int, "
           "int, float, float const*, float const*)")
APEX_LN_BWD = ("void cuComputePartGradGammaBeta<float, float, float>(float const*, float const*, "
               "int, int, float const*, float const*, float, float*, float*)")
MEGATRON_SOFTMAX = ("void scaled_masked_softmax_warp_forward<c10::Half, c10::Half, float, 7>("
                    "c10::Half*, c10::Half const*, unsigned char const*, float, int, int, int, "
                    "int)")
GEMV = ("void gemv2T_kernel_val<int, int, float, float, float, float, 128, 16, 4, 4, false, false,"
        " cublasGemvParamsEx<int, cublasGemvTensorStridedBatched<float const>, "
        "cublasGemvTensorStridedBatched<float const>, cublasGemvTensorStridedBatched<float>, "
        "float> >(cublasGemvParamsEx<int, cublasGemvTensorStridedBatched<float const>, "
        "cublasGemvTensorStridedBatched<float const>, cublasGemvTensorStridedBatched<float>, "
        "float>, float, float)")
GEMMK1 = ("void gemmk1_kernel<int, float, 256, 5, false, false, false, false, "
          "cublasGemvTensorStridedBatched<float const>, "
          "cublasGemvTensorStridedBatched<float const>, "
          "cublasGemvTensorStridedBatched<float>, float, 0>(cublasGemmk1Params<float, "
          "cublasGemvTensorStridedBatched<float const>, cublasGemvTensorStridedBatched<float const>"
          ", cublasGemvTensorStridedBatched<float>, float, biasType<float, float>::type>)")
HGEMM = "ampere_fp16_s16816gemm_fp16_128x128_ldg8_f2f_stages_32x5_tn"
LT_EPILOGUE = ("void cublasLt::epilogue::impl::globalKernel<8, 32, float, float, float, true, "
               "false, true, false, false>(int, int, long, float*, long, float const*, long, "
               "float*, long, float const*, float const*, long, void*, long, float*, float*)")
FBGEMM_PERMUTE = ("void fbgemm_gpu::permute_2D_data_kernel<true, float, int>(int, int, int, "
                  "int const*, int const*, float const*, int*, float*)")
FBGEMM_QUANT = ("void fbgemm_gpu::_float_to_fused8bitrowwise_cuda_kernel<float>(float const*, "
                "int, int, unsigned char*)")
NATIVE_GEMM_LOOKALIKE = ("void at::native::elementwise_kernel<128, 2, at::native::gpu_kernel_impl"
                         "_nocast<at::native::(anonymous namespace)::gemm_and_bias_add_functor<"
                         "float> >(at::TensorIteratorBase&, at::native::(anonymous namespace)::"
                         "gemm_and_bias_add_functor<float> const&)::{lambda(int)#1}>(int, "
                         "at::native::gpu_kernel_impl_nocast<at::native::(anonymous namespace)::"
                         "gemm_and_bias_add_functor<float> >(at::TensorIteratorBase&, "
                         "at::native::(anonymous namespace)::gemm_and_bias_add_functor<float> "
                         "const&)::{lambda(int)#1})")
"""A constructed look-alike: PyTorch pointwise helper with "gemm" in a template argument."""


class Trace:
    """A Kineto-style trace under construction, with a CPU time cursor per thread."""

    def __init__(self, pid: int = 4242, tid: int = 4242, *, device: int = 0,
                 cats: dict[str, str] | None = None, correlation_args: bool = True) -> None:
        self.pid, self.tid, self.device = pid, tid, device
        self.events: list[dict[str, Any]] = []
        self.t = 0.0
        self.corr = 1000
        self.ext = 0
        self.seq = 0
        self.stream_clock: dict[int, float] = {}
        self.cats = {"cpu_op": "cpu_op", "user_annotation": "user_annotation",
                     "cuda_runtime": "cuda_runtime", "kernel": "kernel",
                     "gpu_memcpy": "gpu_memcpy", "gpu_memset": "gpu_memset", **(cats or {})}
        self.correlation_args = correlation_args
        self.header: dict[str, Any] = {"schemaVersion": 1, "deviceProperties": []}
        for name, args in (("process_name", {"name": "python"}),
                           ("process_labels", {"labels": "CPU"})):
            self.events.append({"ph": "M", "name": name, "ts": BASE, "pid": pid, "tid": 0,
                                "args": args})

    def _x(self, cat: str, name: str, ts: float, dur: float, tid: int | None,
           args: dict[str, Any], pid: int | None = None) -> dict[str, Any]:
        e = {"ph": "X", "cat": self.cats.get(cat, cat), "name": name,
             "pid": self.pid if pid is None else pid, "tid": self.tid if tid is None else tid,
             "ts": round(BASE + ts, 3), "dur": round(dur, 3), "args": args}
        self.events.append(e)
        return e

    @contextlib.contextmanager
    def op(self, name: str, *, cat: str = "cpu_op", tid: int | None = None,
           dims: list[Any] | None = None, seq: int | None = None,
           fwd: bool = True) -> Iterator[dict[str, Any]]:
        """A CPU op (or annotation) around what the block emits; time advances 1 us either
        side."""
        start = self.t
        self.t += 1
        self.ext += 1
        args: dict[str, Any] = {"External id": self.ext, "Record function id": 0}
        if seq is not None:
            args["Sequence number"] = seq
            args["Fwd thread id"] = 0 if fwd else 1
        if dims is not None:
            args["Input Dims"] = dims
        e = self._x(cat, name, start, 0.0, tid, args)
        yield e
        self.t += 1
        e["dur"] = round(self.t - start, 3)

    def ann(self, name: str, tid: int | None = None) -> contextlib.AbstractContextManager[Any]:
        """A user annotation (record_function) around the block."""
        return self.op(name, cat="user_annotation", tid=tid)

    def kernel(self, name: str, dur: float, *, stream: int = 7, tid: int | None = None,
               runtime: str = "cudaLaunchKernel", cat: str = "kernel",
               at: float | None = None) -> dict[str, Any]:
        """A launch call at the cursor and its device event on `stream`."""
        self.corr += 1
        launch = self.t
        rt_args: dict[str, Any] = {"External id": self.ext}
        if self.correlation_args:
            rt_args["correlation"] = self.corr
        rt = self._x("cuda_runtime", runtime, launch, 3.0, tid, rt_args)
        self.t += 4
        start = max(self.stream_clock.get(stream, 0.0), launch + 5.0) if at is None else at
        self.stream_clock[stream] = max(self.stream_clock.get(stream, 0.0), start + dur)
        kargs: dict[str, Any] = {"External id": self.ext, "device": self.device,
                                 "stream": stream}
        if self.correlation_args:
            kargs["correlation"] = self.corr
        k = self._x(cat, name, start, dur, stream, kargs, pid=self.device)
        for ph, ev in (("s", rt), ("f", k)):
            flow = {"ph": ph, "id": self.corr, "pid": ev["pid"], "tid": ev["tid"],
                    "ts": ev["ts"], "cat": "ac2g", "name": "ac2g"}
            if ph == "f":
                flow["bp"] = "e"
            self.events.append(flow)
        return k

    def write(self, path: Path, *, level: int = 9, **header: Any) -> None:
        """Write the trace as Kineto does: header keys, traceEvents, traceName (gzip `level`)."""
        self.events.append({"ph": "X", "cat": "Trace", "name": "PyTorch Profiler (0)",
                            "pid": "Spans", "tid": "PyTorch Profiler", "ts": BASE,
                            "dur": self.t, "args": {"Op count": 0}})
        self.events.append({"ph": "i", "s": "g", "name": "Record Window End", "pid": "",
                            "tid": "", "ts": BASE + self.t})
        doc = {**self.header, **header, "traceEvents": self.events,
               "traceName": path.name}
        path.parent.mkdir(parents=True, exist_ok=True)
        data = json.dumps(doc, indent=1).encode()
        path.write_bytes(gzip.compress(data, compresslevel=level, mtime=0))  # reproducible


def _linear(tr: Trace, kernels: list[tuple[str, float]], *, seq: int, m: int, k: int,
            n: int, tid: int | None = None) -> None:
    """aten::linear -> aten::addmm with the given kernels (X[m,k] @ W^T + b -> [m,n])."""
    with tr.op("aten::linear", dims=[[m, k], [n, k], [n]], seq=seq, tid=tid):
        with tr.op("aten::t", dims=[[n, k]], tid=tid):
            pass
        with tr.op("aten::addmm", dims=[[n], [m, k], [k, n], [], []], seq=seq + 1, tid=tid):
            for name, dur in kernels:
                tr.kernel(name, dur, tid=tid)


def cuda_bert_train() -> Trace:
    """One `bertscope profile`-style CUDA training iteration of a 1-layer BERT."""
    tr = Trace(pid=4242, tid=4242)
    bwd = 4250  # the autograd engine's device thread
    T, H, F, V = 8, 64, 256, 500  # tokens, hidden, FFN, vocab
    with tr.ann("bertscope.iter::0"):
        with tr.ann("bertscope.phase::forward"):
            with tr.op("aten::to", dims=[[1, T]]), tr.op("aten::copy_", dims=[[1, T], [1, T]]):
                tr.kernel(MEMCPY_H2D, 2.0, cat="gpu_memcpy", runtime="cudaMemcpyAsync")
            with tr.ann("bertscope::-1::embedding"):
                with tr.op("aten::embedding", dims=[[V, H], [1, T]], seq=1), \
                        tr.op("aten::index_select", dims=[[V, H], [], [T]]):
                    tr.kernel(INDEX_SELECT, 3.0)
                with tr.op("aten::native_layer_norm", dims=[[1, T, H]], seq=2):
                    tr.kernel(LN, 4.0)
            with tr.ann("bertscope::0::qkv"):
                for s in (10, 12, 14):
                    _linear(tr, [(SGEMM, 10.0)], seq=s, m=T, k=H, n=H)
            with tr.ann("bertscope::0::attn_score"):
                with tr.op("aten::matmul", dims=[[1, 4, T, 16], [1, 4, 16, T]], seq=20), \
                        tr.op("aten::bmm", dims=[[4, T, 16], [4, 16, T]], seq=21):
                    tr.kernel(XMMA_SM90, 6.0)
                with tr.op("aten::div", dims=[[1, 4, T, T], []], seq=22):
                    tr.kernel(MUL, 1.5)
            with tr.ann("bertscope::0::attn_softmax"):
                with tr.op("aten::softmax", dims=[[1, 4, T, T]], seq=23), \
                        tr.op("aten::_softmax", dims=[[1, 4, T, T]]):
                    tr.kernel(SOFTMAX, 3.0)
                with tr.op("aten::dropout", dims=[[1, 4, T, T]], seq=24), \
                        tr.op("aten::native_dropout", dims=[[1, 4, T, T]]):
                    tr.kernel(DROPOUT, 2.5)
            with tr.ann("bertscope::0::attn_context"), \
                    tr.op("aten::matmul", dims=[[1, 4, T, T], [1, 4, T, 16]], seq=25), \
                    tr.op("aten::bmm", dims=[[4, T, T], [4, T, 16]], seq=26):
                tr.kernel(NVJET, 5.0)
            with tr.ann("bertscope::0::attn_output"):
                _linear(tr, [(CUTLASS_K2, 9.0)], seq=27, m=T, k=H, n=H)
            with tr.ann("bertscope::0::attn_add_norm"):
                with tr.op("aten::add", dims=[[1, T, H], [1, T, H]], seq=29):
                    tr.kernel(ADD, 1.0)
                with tr.op("aten::layer_norm", dims=[[1, T, H]], seq=30), \
                        tr.op("aten::native_layer_norm", dims=[[1, T, H]]):
                    tr.kernel(LN, 4.0)
            with tr.ann("bertscope::0::ffn1"):
                _linear(tr, [(CUTLASS, 12.0)], seq=31, m=T, k=H, n=F)
            with tr.ann("bertscope::0::ffn_act"), tr.op("aten::gelu", dims=[[1, T, F]], seq=33):
                tr.kernel(GELU, 3.0)
            with tr.ann("bertscope::0::ffn2"):
                _linear(tr, [(CUTLASS_WMMA, 11.0), (SPLITK, 1.0)], seq=34, m=T, k=F, n=H)
            with tr.ann("bertscope::0::ffn_add_norm"), \
                    tr.op("aten::layer_norm", dims=[[1, T, H]], seq=36), \
                    tr.op("aten::native_layer_norm", dims=[[1, T, H]]):
                tr.kernel(LN, 4.0)
            with tr.ann("bertscope::-1::mlm_head"):
                _linear(tr, [(GEMMSN, 14.0)], seq=37, m=T, k=H, n=V)
            with tr.ann("bertscope::-1::loss"), \
                    tr.op("aten::cross_entropy_loss", dims=[[T, V], [T]], seq=39):
                with tr.op("aten::log_softmax", dims=[[T, V]], seq=40), \
                        tr.op("aten::_log_softmax", dims=[[T, V]]):
                    tr.kernel(LOGSOFTMAX, 3.0)
                with tr.op("aten::nll_loss_nd", dims=[[T, V], [T]], seq=41), \
                        tr.op("aten::nll_loss_forward", dims=[[T, V], [T]]):
                    tr.kernel(NLL, 2.0)
        tr.t += 2
        with tr.ann("bertscope.phase::backward"):
            tr.t += 2

            def node(name: str, seq: int) -> contextlib.AbstractContextManager[Any]:
                return tr.op(f"autograd::engine::evaluate_function: {name}", tid=bwd, seq=seq,
                             fwd=False)

            with node("NllLossBackward0", 41), tr.op("NllLossBackward0", tid=bwd), \
                    tr.op("aten::nll_loss_backward", dims=[[], [T, V], [T]], tid=bwd):
                tr.kernel(FILL, 1.0, tid=bwd)
                tr.kernel(NLL_BWD, 2.0, tid=bwd)
            with node("LogSoftmaxBackward0", 40), tr.op("LogSoftmaxBackward0", tid=bwd), \
                    tr.op("aten::_log_softmax_backward_data", dims=[[T, V], [T, V]], tid=bwd):
                tr.kernel(WARP_LOGSOFTMAX_BWD, 3.0, tid=bwd)
            for name, s, (m, k, n) in (("AddmmBackward0", 38, (T, H, V)),
                                       ("AddmmBackward0", 35, (T, F, H))):
                with node(name, s), tr.op(name, tid=bwd):
                    # dgrad: dY[m, n] @ W[n, k];  wgrad: dY^T[n, m] @ X[m, k]
                    with tr.op("aten::mm", dims=[[m, n], [n, k]], tid=bwd):
                        tr.kernel(SGEMM_NN, 8.0, tid=bwd)
                    with tr.op("aten::mm", dims=[[n, m], [m, k]], tid=bwd):
                        tr.kernel(XMMA_SM80, 9.0, tid=bwd)
                    with tr.op("aten::sum", dims=[[m, n], [], [], []], tid=bwd):
                        tr.kernel(REDUCE_SUM, 1.5, tid=bwd)
            # DDP: the first gradient bucket is ready; its all-reduce overlaps the rest
            with tr.op("record_param_comms", tid=bwd), \
                    tr.op("nccl:all_reduce", cat="user_annotation", tid=bwd):
                tr.kernel(NCCL_AR, 40.0, stream=20, tid=bwd)
            with node("GeluBackward0", 33), tr.op("GeluBackward0", tid=bwd), \
                    tr.op("aten::gelu_backward", dims=[[1, T, F], [1, T, F]], tid=bwd):
                tr.kernel(GELU_BWD, 3.0, tid=bwd)
            with node("NativeLayerNormBackward0", 30), tr.op("NativeLayerNormBackward0", tid=bwd), \
                    tr.op("aten::native_layer_norm_backward", dims=[[1, T, H]], tid=bwd):
                tr.kernel(LN_BWD_IN, 3.0, tid=bwd)
                tr.kernel(LN_BWD_GB, 2.0, tid=bwd)
            with node("NativeDropoutBackward0", 24), tr.op("NativeDropoutBackward0", tid=bwd), \
                    tr.op("aten::native_dropout_backward", dims=[[1, 4, T, T]], tid=bwd):
                tr.kernel(DROPOUT_BWD, 2.0, tid=bwd)
            with node("SoftmaxBackward0", 23), tr.op("SoftmaxBackward0", tid=bwd), \
                    tr.op("aten::_softmax_backward_data", dims=[[1, 4, T, T]], tid=bwd):
                tr.kernel(SOFTMAX_BWD, 3.0, tid=bwd)
            with node("EmbeddingBackward0", 1), tr.op("EmbeddingBackward0", tid=bwd), \
                    tr.op("aten::embedding_dense_backward", dims=[[1, T, H], [1, T]], tid=bwd):
                tr.kernel(MEMSET, 1.0, cat="gpu_memset", runtime="cudaMemsetAsync", tid=bwd)
                tr.kernel(EMB_BWD, 4.0, tid=bwd)
            with node("torch::autograd::AccumulateGrad", -1), \
                    tr.op("torch::autograd::AccumulateGrad", tid=bwd), \
                    tr.op("aten::add_", dims=[[V, H], [V, H]], tid=bwd):
                tr.kernel(ADD, 2.0, tid=bwd)
            with tr.op("record_param_comms", tid=bwd), \
                    tr.op("nccl:all_reduce", cat="user_annotation", tid=bwd):
                tr.kernel(NCCL_AR, 30.0, stream=20, tid=bwd)
            tr.t = max(tr.t, max(tr.stream_clock.values()) + 1)
        with tr.ann("bertscope.phase::optimizer"), tr.ann("Optimizer.step#AdamW.step"):
            with tr.op("aten::_foreach_norm", dims=[[V, H]]):
                tr.kernel(LPNORM, 3.0)
            with tr.op("aten::_foreach_mul_", dims=[[V, H]]):
                tr.kernel(FOREACH_MUL, 2.0)
            with tr.op("aten::_fused_adamw_", dims=[[V, H]]):
                tr.kernel(FUSED_ADAMW, 20.0)
            with tr.op("aten::item", dims=[[]]), tr.op("aten::_local_scalar_dense", dims=[[]]):
                tr.kernel(MEMCPY_D2H, 1.0, cat="gpu_memcpy", runtime="cudaMemcpyAsync")
        tr.t = max(tr.t, max(tr.stream_clock.values()) + 1)
    tr.header["distributedInfo"] = {"backend": "nccl", "rank": 0, "world_size": 2}
    return tr


def rocm_infer() -> Trace:
    """ROCm inference of a 2-layer encoder: no rank, no steps, flows instead of correlation
    args, hipLaunchKernel / hipExtModuleLaunchKernel."""
    tr = Trace(pid=77, tid=77, device=2, correlation_args=False)
    T, H = 128, 1024
    with tr.ann("## forward ##"):
        with tr.op("aten::copy_", dims=[[T, H], [T, H]]):
            tr.kernel(ROCM_H2D, 5.0, cat="gpu_memcpy", runtime="hipMemcpyWithStream")
        with tr.op("aten::fill_", dims=[[T, H], []]):
            tr.kernel(ROCCLR_FILL, 1.0, runtime="hipMemsetAsync")
        for _layer in range(2):
            with tr.op("aten::linear", dims=[[T, H], [3 * H, H], [3 * H]]), \
                    tr.op("aten::addmm", dims=[[3 * H], [T, H], [H, 3 * H], [], []]):
                tr.kernel(TENSILE_HHS, 20.0, runtime="hipExtModuleLaunchKernel")
            with tr.op("aten::_scaled_dot_product_flash_attention", dims=[[1, 16, T, 64]]):
                tr.kernel(CK_FMHA, 15.0, runtime="hipLaunchKernel")
            with tr.op("aten::bmm", dims=[[16, T, 64], [16, 64, T]]):
                tr.kernel(TENSILE_BATCHED, 6.0, runtime="hipExtModuleLaunchKernel")
            with tr.op("aten::_softmax", dims=[[1, 16, T, T]]):
                tr.kernel(WARP_SOFTMAX, 3.0, runtime="hipLaunchKernel")
            with tr.op("aten::mm", dims=[[T, H], [H, H]]):
                tr.kernel(CK_GEMM, 9.0, runtime="hipLaunchKernel")
            with tr.op("aten::native_layer_norm", dims=[[T, H]]):
                tr.kernel(LN_HALF, 4.0, runtime="hipLaunchKernel")
            with tr.op("aten::gelu", dims=[[T, 4 * H]]):
                tr.kernel(GELU_TANH_HALF, 5.0, runtime="hipLaunchKernel")
        with tr.op("aten::copy_", dims=[[T, H], [T, H]]):
            tr.kernel(ROCM_D2H, 4.0, cat="gpu_memcpy", runtime="hipMemcpyWithStream")
    tr.t = max(tr.t, max(tr.stream_clock.values()) + 1)
    return tr


def triton_compiled() -> Trace:
    """torch.compile training: two ProfilerStep#N iterations of Triton, attention and cuDNN
    kernels launched through the driver API; backward on the autograd thread."""
    tr = Trace(pid=9000, tid=9000)
    bwd = 9001
    for step in (1, 2):
        with tr.ann(f"ProfilerStep#{step}"):
            with tr.ann("Torch-Compiled Region: 0/0"), tr.ann("CompiledFunction"):
                for key in ("embedding", "layer_norm", "tem_addmm", "to_copy", "clone"):
                    tr.kernel(TRITON[key], 4.0, runtime="cuLaunchKernel")
                with tr.op("aten::_scaled_dot_product_flash_attention",
                           dims=[[1, 4, 8, 16]]):
                    tr.kernel(FLASH_FWD, 8.0)
                with tr.op("aten::_scaled_dot_product_cudnn_attention", dims=[[1, 4, 8, 16]]):
                    tr.kernel(CUDNN_SDPA, 7.0)
                with tr.op("aten::convolution", dims=[[1, 3, 16, 16], [8, 3, 3, 3]]):
                    tr.kernel(CUDNN_NCHW, 1.0)
                    tr.kernel(CUDNN_CONV, 5.0)
                for key in ("tem_mm", "tem_bmm", "softmax", "dropout", "gelu", "add", "nll"):
                    tr.kernel(TRITON[key], 3.0, runtime="cuLaunchKernel")
            tr.t += 2
            with tr.op("autograd::engine::evaluate_function: CompiledFunctionBackward",
                       tid=bwd, seq=5, fwd=False), \
                    tr.op("CompiledFunctionBackward", tid=bwd), \
                    tr.ann("CompiledFunctionBackward", tid=bwd):
                for key in ("gelu_bwd", "layer_norm_bwd", "sum", "per_sum", "embedding_bwd"):
                    tr.kernel(TRITON[key], 3.0, runtime="cuLaunchKernel", tid=bwd)
                with tr.op("aten::_efficient_attention_backward", dims=[[1, 4, 8, 16]],
                           tid=bwd):
                    tr.kernel(FMHA_CUTLASS_B, 9.0, tid=bwd)
                with tr.op("aten::_flash_attention_backward", dims=[[1, 4, 8, 16]], tid=bwd):
                    tr.kernel(FLASH_BWD, 9.0, tid=bwd)
            with tr.ann("Optimizer.step#SGD.step"):
                with tr.op("aten::_fused_sgd_", dims=[[64, 64]]):
                    tr.kernel(FUSED_SGD, 6.0)
                tr.kernel(TRITON["foreach"], 2.0, runtime="cuLaunchKernel")
            tr.t = max(tr.t, max(tr.stream_clock.values()) + 1)
    return tr


def multirank(rank: int) -> Trace:
    """One rank of a 2-rank LAMB run with NCCL collectives; rank 1 uses the older category
    spellings and a B/E pair, and has no distributedInfo (its file name says the rank)."""
    cats = ({"cpu_op": "Operator", "cuda_runtime": "Runtime", "kernel": "Kernel",
             "gpu_memcpy": "Memcpy", "gpu_memset": "Memset"} if rank else None)
    tr = Trace(pid=100 + rank, tid=100 + rank, device=rank, cats=cats)
    T, H, V = 16, 128, 1000
    slow = 1.25 if rank else 1.0  # rank 1 is a straggler: its kernels take 25% longer
    with tr.ann("ProfilerStep#7"):
        with tr.ann("## forward ##"):
            with tr.op("fbgemm::permute_2D_sparse_data", dims=[[2, T], [T]]):
                tr.kernel(FBGEMM_PERMUTE, 2.0 * slow)
            with tr.op("aten::embedding", dims=[[V, H], [T]]):
                tr.kernel(INDEX_SELECT, 3.0 * slow)
            with tr.op("aten::to", dims=[[T, H]]):
                tr.kernel(FBGEMM_QUANT, 1.0 * slow)
            with tr.op("apex::fused_layer_norm", dims=[[T, H]]):
                tr.kernel(APEX_LN, 3.0 * slow)
            with tr.op("aten::linear", dims=[[T, H], [H, H]]), tr.op("aten::addmm"):
                tr.kernel(COPY, 1.0 * slow)  # addmm first copies the bias into the output
                tr.kernel(HGEMM, 10.0 * slow)
                tr.kernel(LT_EPILOGUE, 1.0 * slow)
            with tr.op("aten::mv", dims=[[H, H], [H]]):
                tr.kernel(GEMV, 2.0 * slow)
            with tr.op("aten::mm", dims=[[H, 1], [1, H]]):
                tr.kernel(GEMMK1, 1.5 * slow)
            with tr.op("aten::add", dims=[[T, H], [H]]):
                tr.kernel(NATIVE_GEMM_LOOKALIKE, 1.0 * slow)
            with tr.op("megatron::scaled_masked_softmax", dims=[[1, 4, T, T]]):
                tr.kernel(MEGATRON_SOFTMAX, 2.0 * slow)
            with tr.op("aten::cross_entropy_loss", dims=[[T, V], [T]]):
                tr.kernel(LOGSOFTMAX, 3.0 * slow)
                tr.kernel(REDUCE_SUM, 1.0 * slow)  # a reduction inside the loss is loss work
        with tr.ann("## backward ##"):
            with tr.op("autograd::engine::evaluate_function: FusedLayerNormAffineFunction"
                       "Backward", seq=3, fwd=False), \
                    tr.op("apex::fused_layer_norm_backward", dims=[[T, H]]):
                tr.kernel(APEX_LN_BWD, 3.0 * slow)
            with tr.op("autograd::engine::evaluate_function: MmBackward0", seq=4, fwd=False), \
                    tr.op("MmBackward0"):
                with tr.op("aten::mm", dims=[[T, H], [H, H]]):
                    tr.kernel(SGEMM, 8.0 * slow)
                with tr.op("aten::mm", dims=[[H, T], [T, H]]):
                    tr.kernel(XMMA_SM80, 8.0 * slow)
            with tr.op("c10d::allreduce_"):
                tr.kernel(NCCL_AR_OLD if rank else NCCL_AR, 25.0, stream=13)
            with tr.op("c10d::reduce_scatter_tensor_coalesced_"):
                tr.kernel(NCCL_RS, 12.0 * slow, stream=13)
        with tr.ann("Optimizer.step#FusedLAMB.step"):
            with tr.op("apex::multi_tensor_l2norm"):
                tr.kernel(L2NORM, 2.0 * slow)
            with tr.op("apex::multi_tensor_lamb_stage1"):
                tr.kernel(LAMB1, 6.0 * slow)
            with tr.op("apex::multi_tensor_lamb_stage2"):
                tr.kernel(LAMB2, 4.0 * slow)
            with tr.op("c10d::allgather_into_tensor_coalesced"):
                tr.kernel(NCCL_AG, 10.0 * slow, stream=13)
            with tr.op("aten::copy_"):
                tr.kernel(MEMCPY_D2D, 2.0 * slow, cat="gpu_memcpy", runtime="cudaMemcpyAsync")
        tr.t = max(tr.t, max(tr.stream_clock.values()) + 1)
    if rank:  # a user annotation written as a B/E pair, around the whole step
        tr.events.append({"ph": "B", "cat": "user_annotation", "name": "train_step",
                          "pid": tr.pid, "tid": tr.tid, "ts": BASE - 1})
        tr.events.append({"ph": "E", "cat": "user_annotation", "name": "train_step",
                          "pid": tr.pid, "tid": tr.tid, "ts": BASE + tr.t + 1})
    else:
        tr.header["distributedInfo"] = {"backend": "nccl", "rank": 0, "world_size": 2}
    return tr


FIXTURES = ("cuda_bert_train.json.gz", "rocm_infer.json.gz", "triton_compiled.json.gz",
            "multirank/trace_a.json.gz", "multirank/rank1.pt.trace.json.gz")


def main(out: Path = HERE) -> None:
    """Write every fixture into `out`."""
    cuda_bert_train().write(out / FIXTURES[0])
    rocm_infer().write(out / FIXTURES[1])
    triton_compiled().write(out / FIXTURES[2])
    multirank(0).write(out / FIXTURES[3])
    multirank(1).write(out / FIXTURES[4])


if __name__ == "__main__":
    main()
