import pytest
from ansible.module_utils.ncclprep.probes.busbw import algbw_gbps, bus_factor, busbw_gbps


@pytest.mark.parametrize(
    "op,n,factor",
    [("all_reduce", 3, 4 / 3), ("all_reduce", 8, 1.75), ("all_reduce", 1, 0.0),
     ("all_gather", 4, 0.75), ("reduce_scatter", 2, 0.5), ("all_to_all", 16, 15 / 16),
     ("broadcast", 8, 1.0), ("reduce", 5, 1.0)],
)
def test_bus_factor_matches_nccl_tests(op, n, factor):
    assert bus_factor(op, n) == pytest.approx(factor)


def test_algbw_and_busbw_in_gb_per_s():
    # 16 MB in 10 ms = 1.6 GB/s; all_reduce over 4 ranks x 1.5
    assert algbw_gbps(16_000_000, 0.01) == pytest.approx(1.6)
    assert busbw_gbps("all_reduce", 16_000_000, 0.01, 4) == pytest.approx(2.4)


def test_bad_inputs_raise_with_the_value():
    with pytest.raises(ValueError, match="allreduce"):
        bus_factor("allreduce", 4)
    with pytest.raises(ValueError, match="world_size"):
        bus_factor("all_reduce", 0)
    with pytest.raises(ValueError, match="time"):
        algbw_gbps(1, 0)
