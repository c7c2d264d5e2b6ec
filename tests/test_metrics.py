from fabreg.metrics import perfvar_name, size_label, split_perfvar
from fabreg.schema import lower_is_better


def test_size_labels_round_trip():
    for nbytes, label in [(8, "8B"), (1024, "1KB"), (65536, "64KB"), (131072, "128KB"),
                          (1 << 20, "1MB"), (4 << 20, "4MB"), (1536, "1536B")]:
        assert size_label(nbytes) == label
        assert split_perfvar(perfvar_name("latency", nbytes)) == ("latency", nbytes)
    assert split_perfvar("p99_over_p50") == ("p99_over_p50", None)


def test_direction():
    assert lower_is_better("latency", "us")
    assert not lower_is_better("bandwidth", "MB/s")
    assert not lower_is_better("busbw", None)
    assert not lower_is_better("rate", "Gbit/s")
    assert lower_is_better("latency_p99", None)
    assert not lower_is_better("something", None)
