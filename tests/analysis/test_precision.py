"""Kernel precision: the rule list on names, the fallbacks, and sanity on real traces."""

from __future__ import annotations

import pytest
from tests.analysis import _kineto_synthetic as synthetic

from stepscope.analysis import kernel_precision, kernel_precision_by_name
from stepscope.analysis.precision import precision_from_name


@pytest.mark.parametrize(
    ("name", "precision"),
    [
        ("sm80_xmma_gemm_f32f32_tf32f32_f32_nn_n_tilesize128x128x16", "tf32"),
        ("cutlass_80_tensorop_s1688gemm_128x128_32x3_nn_align4", "tf32"),
        ("xmma_new::gemm::kernel<xmma_new::Ampere_hmma_tf32_traits<unsigned int, float>>", "tf32"),
        ("cutlass_70_wmma_tensorop_f16_s161616gemm_f16_32x32_128x2_tn_align8", "fp16"),
        ("volta_fp16_s884gemm_fp16_128x128_ldg8_f2f_nn", "fp16"),
        ("ampere_sgemm_128x64_nn", "fp32"),
        ("void at::native::reduce_kernel<512, 1, at::native::ReduceOp<double, ...>>", "fp64"),
        (
            "void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<c10::BFloat16>>",
            "bf16",
        ),
        ("ncclDevKernel_AllReduce_Sum_bf16_RING_LL(ncclDevKernelArgsStorage<4096ul>)", "bf16"),
        ("ncclKernel_AllReduce_RING_LL_Sum_float(ncclDevComm*, unsigned long, ncclWork*)", "fp32"),
        ("sm90_xmma_gemm_e4m3e4m3_e4m3f32_f32_tn_n_tilesize128x128x64", "fp8"),
        ("sm80_xmma_gemm_i8i8_i8i32_f32_tn_n_tilesize128x128x64", "int8"),
        ("void at::native::index_kernel<long>", "integer"),
        ("triton_poi_fused_add_cos_sin_0", None),
        # NCCL compiles its byte-moving kernels for int8_t only: the suffix is not the data's
        (
            "ncclKernel_SendRecv_RING_SIMPLE_Sum_int8_t(ncclDevComm*, unsigned long, ncclWork*)",
            None,
        ),
        ("ncclKernel_Broadcast_RING_LL_Sum_int8_t(ncclDevComm*, unsigned long, ncclWork*)", None),
        ("ncclKernel_AllGather_RING_LL_Sum_int8_t(ncclDevComm*, unsigned long, ncclWork*)", None),
    ],
)
def test_name_rules(name, precision):
    assert precision_from_name(name) == precision


@pytest.fixture(scope="module")
def job(tmp_path_factory):
    return synthetic.open_synthetic_job(tmp_path_factory.mktemp("synthetic"))


def test_fallback_to_the_launching_op(job):
    by_name = kernel_precision_by_name(job).set_index("name")
    triton = by_name.loc["triton_poi_fused_add_0"]
    assert (triton["precision"], triton["source"]) == ("bf16", "launch_op")
    assert by_name.loc["volta_sgemm_128x64_nn", "precision"] == "fp32"
    table = kernel_precision(job).set_index("precision")
    # sgemm 30 + nccl float 40 = fp32 70; FillFunctor<c10::Half> 30; triton 10.
    assert table["total_us"].to_dict() == {"fp32": 70, "fp16": 30, "bf16": 10}
    assert table["pct"].sum() == pytest.approx(100)


def _open(shared_fixtures, tmp_path, name):
    from stepscope.store import open_job

    return open_job(shared_fixtures / "kineto" / name, cache_dir=tmp_path)


def test_tf32_trace_is_mostly_fp32_and_tf32(shared_fixtures, tmp_path):
    table = kernel_precision(_open(shared_fixtures, tmp_path, "a100_rank0of2_nccl.json.gz"))
    shares = table.set_index("precision")["pct"]
    assert shares["tf32"] > 10  # the A100 convolutions run sm80 tf32 kernels
    assert shares["fp32"] + shares["tf32"] > 95
    assert shares.get("unknown", 0) < 1


def test_nccl_broadcast_takes_the_dtype_it_carries_not_its_int8_name(shared_fixtures, tmp_path):
    # DDP broadcasts float parameters and long buffers; NCCL names both kernels ..._int8_t.
    by_name = kernel_precision_by_name(
        _open(shared_fixtures, tmp_path, "a100_rank0of2_nccl.json.gz")
    )
    broadcast = by_name[by_name["name"].str.startswith("ncclKernel_Broadcast")]
    assert set(zip(broadcast["precision"], broadcast["source"], strict=True)) == {
        ("fp32", "nccl_dtype"),
        ("integer", "nccl_dtype"),
    }
    assert "int8" not in set(by_name["precision"])


def test_fp16_trace_has_half_precision_kernels(shared_fixtures, tmp_path):
    job = _open(shared_fixtures, tmp_path, "two_ranks_one_job/sampled_rank-0.json.gz")
    by_name = kernel_precision_by_name(job)
    half = by_name[by_name["precision"] == "fp16"]
    assert len(half) > 0
    assert half["name"].str.contains("Half|f16|h1688|h884", regex=True).all()
    assert by_name["source"].isin(["name", "nccl_dtype", "launch_op", "none"]).all()


def test_cupti_counters_decide_when_the_name_cannot(shared_fixtures, tmp_path):
    by_name = kernel_precision_by_name(
        _open(shared_fixtures, tmp_path, "a100_cupti_counters.json.gz")
    ).set_index("name")
    # No type token in this cuBLAS name; its counters are all single-precision instructions.
    gemm = by_name.loc["ampere_gcgemm_64x64_nt"]
    assert (gemm["precision"], gemm["source"]) == ("fp32", "counters")
    tf32 = by_name[by_name.index.str.contains("Ampere_hmma_tf32")]
    assert len(tf32) > 0 and (tf32["precision"] == "tf32").all()
