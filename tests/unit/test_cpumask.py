import pytest
from ansible.module_utils.ncclprep.cpumask import cpus_to_mask, format_cpulist, mask_to_cpus, parse_cpulist


def test_cpulist_round_trip_with_the_numactl_case_ranges():
    assert parse_cpulist("0-31") == list(range(32))
    assert parse_cpulist("48-63,176-191") == list(range(48, 64)) + list(range(176, 192))
    assert format_cpulist(parse_cpulist("3,0-2,8,10-11,9")) == "0-3,8-11"
    assert parse_cpulist("") == [] and format_cpulist([]) == ""


@pytest.mark.parametrize("bad", ["3-1", "a", "1-", "0-3;5"])
def test_bad_cpulist_names_the_part(bad):
    with pytest.raises(ValueError, match="CPU"):
        parse_cpulist(bad)


@pytest.mark.parametrize(
    "cpus,nr,mask",
    [("0-1", 2, "3"), ("0-7", 8, "ff"), ("0-15", 40, "00,0000ffff"),
     ("32-63", 64, "ffffffff,00000000"), ("0", 32, "00000001"), ("64-79", 96, "0000ffff,00000000,00000000")],
)
def test_mask_matches_kernel_layout(cpus, nr, mask):
    assert cpus_to_mask(cpus, nr) == mask
    assert mask_to_cpus(mask) == parse_cpulist(cpus)


def test_mask_errors():
    with pytest.raises(ValueError, match=r"outside 0..7"):
        cpus_to_mask([8], 8)
    with pytest.raises(ValueError, match="not a hex CPU mask"):
        mask_to_cpus("zz")
