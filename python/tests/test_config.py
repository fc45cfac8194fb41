"""strata.config() / strata.set_config(): the settings by name, changed without touching the
environment; per-process ones refused once read."""
import numpy as np
import pytest

import strata


def test_config_lists_every_setting_with_its_value():
    c = strata.config()
    assert set(c) == {"cpu_devices", "profile", "fusion", "trace_path", "isa",
                      "collective_timeout_ms", "dump_dir", "cache_dir", "index_checks", "device_threads",
                      "spmd_trace"}
    assert c["cpu_devices"] >= 1 and c["collective_timeout_ms"] > 0


def test_index_checks_can_be_turned_off_and_on_again():
    x = strata.tensor(np.arange(4, dtype=np.float32))
    index = strata.tensor(np.array([1, 7]))
    with pytest.raises(strata.Error, match="out of range"):
        strata.index_select(x, 0, index).numpy()
    strata.set_config(index_checks=False)
    try:
        assert strata.config()["index_checks"] is False
        # unchecked, the gather clamps as XLA's does: index 7 reads the last element
        np.testing.assert_array_equal(strata.index_select(x, 0, index).numpy(), [1, 3])
    finally:
        strata.set_config(index_checks=True)
    with pytest.raises(strata.Error, match="out of range"):
        strata.index_select(x, 0, index).numpy()


def test_the_dump_directory_receives_the_compiled_programs(tmp_path):
    strata.set_config(dump_dir=str(tmp_path))
    try:
        (strata.tensor([1.0, 2.0]) * 3 + 1).numpy()
    finally:
        strata.set_config(dump_dir="")
    assert any(p.suffix == ".hlo" or "hlo" in p.name for p in tmp_path.iterdir())


def test_a_name_that_is_not_a_setting_is_a_type_error():
    with pytest.raises(TypeError, match="no setting named 'fuse'"):
        strata.set_config(fuse=False)


def test_a_per_process_setting_cannot_change_once_kernels_ran():
    (strata.ones(2) + 1).numpy()  # the default client exists now
    devices = strata.config()["cpu_devices"]
    with pytest.raises(strata.Error, match="cpu_devices is read once per process"):
        strata.set_config(cpu_devices=devices + 1)
    assert strata.config()["cpu_devices"] == devices
    with pytest.raises(strata.Error, match="device_threads must be in"):
        strata.set_config(device_threads=-2)
