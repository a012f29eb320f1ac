import pytest

from slurmpolicy.hostlist import HostlistError, compress, expand


@pytest.mark.parametrize(
    ("text", "hosts"),
    [
        ("dgx[01-04,07]", ["dgx01", "dgx02", "dgx03", "dgx04", "dgx07"]),
        ("dgx[08-10]", ["dgx08", "dgx09", "dgx10"]),
        ("n[8-10]", ["n8", "n9", "n10"]),
        ("a[1-2]b[3-4]", ["a1b3", "a1b4", "a2b3", "a2b4"]),
        ("login1,gpu[1-2]", ["login1", "gpu1", "gpu2"]),
        ("", []),
        ("(null)", []),
    ],
)
def test_expand(text, hosts):
    assert expand(text) == hosts


@pytest.mark.parametrize("bad", ["dgx[01-", "dgx]", "dgx[a-b]", "dgx[5-1]", "dgx[[1]]"])
def test_bad_hostlist_names_the_text(bad):
    with pytest.raises(HostlistError, match="hostlist"):
        expand(bad)


def test_compress_round_trips():
    hosts = ["dgx01", "dgx02", "dgx03", "dgx07", "login1", "n9", "n10"]
    text = compress(hosts)
    assert sorted(expand(text)) == sorted(hosts)
    assert "dgx[01-03,07]" in text


def test_compress_joins_unpadded_numbers_to_a_padded_range():
    assert compress([f"gpu{i:02d}" for i in range(1, 17)]) == "gpu[01-16]"
    assert compress(["gpu09", "gpu10", "gpu11"]) == "gpu[09-11]"
    assert compress(["n8", "n9", "n10"]) == "n[8-10]"
    mixed = ["dgx007", "dgx010", "dgx1000", "node5"]
    assert compress(mixed) == "dgx[007,010,1000],node5"
    assert sorted(expand(compress(mixed))) == sorted(mixed)
