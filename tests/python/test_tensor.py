# ferry.Tensor and DLPack, both ways, with numpy and torch: bytes, dtype, shape, device, which
# capsule is returned, and who keeps whose memory alive.
import ctypes
import gc

import numpy as np
import pytest

capsule_name = ctypes.pythonapi.PyCapsule_GetName
capsule_name.restype = ctypes.c_char_p
capsule_name.argtypes = [ctypes.py_object]
capsule_pointer = ctypes.pythonapi.PyCapsule_GetPointer
capsule_pointer.restype = ctypes.c_void_p
capsule_pointer.argtypes = [ctypes.py_object, ctypes.c_char_p]


@pytest.mark.parametrize(
    "dtype,name",
    [(np.uint8, "u8"), (np.uint16, "u16"), (np.uint32, "u32"), (np.int32, "i32"),
     (np.int64, "i64"), (np.float16, "f16"), (np.float32, "f32"), (np.float64, "f64")],
)
def test_numpy_round_trip_shares_memory(ferry, dtype, name):
    a = (np.arange(24) * 3).astype(dtype).reshape(2, 3, 4)
    t = ferry.from_dlpack(a)
    assert t.shape == (2, 3, 4) and t.dtype == name and str(t.device) == "cpu"
    assert t.numel() == 24 and t.nbytes == a.nbytes and len(t) == 2
    v = t.numpy()
    assert v.dtype == a.dtype and v.shape == a.shape
    np.testing.assert_array_equal(v, a)
    a[1, 2, 3] = 7  # the same memory
    assert v[1, 2, 3] == 7
    back = np.from_dlpack(t)
    assert back.ctypes.data == a.ctypes.data
    np.testing.assert_array_equal(np.asarray(t), a)


def test_the_producer_is_kept_alive(ferry):
    a = np.arange(1000, dtype=np.float32)
    t = ferry.from_dlpack(a)
    del a
    gc.collect()
    np.testing.assert_array_equal(t.numpy(), np.arange(1000, dtype=np.float32))


def test_numpy_view_keeps_the_tensor_alive(ferry):
    t = ferry.zeros([3, 2], "f64")
    v = t.numpy()
    del t
    gc.collect()
    assert v.sum() == 0.0 and v.shape == (3, 2)


def test_non_contiguous_arrays_are_refused(ferry):
    a = np.arange(20, dtype=np.int32).reshape(4, 5)[:, ::2]
    with pytest.raises((ferry.ConfigError, BufferError, TypeError)):
        ferry.from_dlpack(a)


def test_objects_without_dlpack_are_a_type_error(ferry):
    with pytest.raises(TypeError, match="no __dlpack__"):
        ferry.from_dlpack([1, 2, 3])


def test_legacy_capsule_without_max_version(ferry):
    t = ferry.from_dlpack(np.arange(6, dtype=np.int64))
    for cap in (t.__dlpack__(), t.__dlpack__(max_version=(0, 8))):
        assert capsule_name(cap) == b"dltensor"
    assert t.__dlpack_device__() == (1, 0)


def test_versioned_capsule_for_max_version_1(ferry):
    a = np.arange(6, dtype=np.int64).reshape(2, 3)
    t = ferry.from_dlpack(a)
    cap = t.__dlpack__(max_version=(1, 2))
    assert capsule_name(cap) == b"dltensor_versioned"
    p = capsule_pointer(cap, b"dltensor_versioned")
    major, minor = ctypes.c_uint32.from_address(p).value, ctypes.c_uint32.from_address(p + 4).value
    assert (major, minor) == (1, 0)
    # flags at 24, then DLTensor: data pointer at 32, device (type, id) at 40, ndim at 48
    assert ctypes.c_uint64.from_address(p + 24).value == 0
    assert ctypes.c_void_p.from_address(p + 32).value == a.ctypes.data
    assert ctypes.c_int32.from_address(p + 40).value == 1
    assert ctypes.c_int32.from_address(p + 48).value == 2

    class Producer:  # a producer of the new standard: ferry takes its versioned capsule
        def __dlpack__(self, stream=None, max_version=None):
            assert max_version == (1, 0)
            return t.__dlpack__(max_version=max_version)

        def __dlpack_device__(self):
            return (1, 0)

    u = ferry.from_dlpack(Producer())
    np.testing.assert_array_equal(u.numpy(), a)
    assert u.shares_storage_with(t) or u.numpy().ctypes.data == a.ctypes.data


def test_unconsumed_and_consumed_capsules_free_once(ferry):
    t = ferry.from_dlpack(np.arange(4, dtype=np.uint8))
    for _ in range(1000):
        t.__dlpack__()  # never consumed: the capsule's destructor frees the export
        t.__dlpack__(max_version=(1, 0))
    cap = t.__dlpack__()
    u = ferry.from_dlpack(cap)
    assert capsule_name(cap) == b"used_dltensor"
    with pytest.raises(BufferError):
        ferry.from_dlpack(cap)  # a capsule is consumed once
    np.testing.assert_array_equal(u.numpy(), [0, 1, 2, 3])


def test_requests_that_cannot_be_honoured(ferry):
    t = ferry.from_dlpack(np.arange(4, dtype=np.uint8))
    with pytest.raises(BufferError):
        t.__dlpack__(dl_device=(2, 0))
    with pytest.raises(BufferError):
        t.__dlpack__(dl_device=(2, 0), copy=False)
    cap = t.__dlpack__(dl_device=(1, 0), copy=False)
    assert capsule_name(cap) == b"dltensor"
    copied = ferry.from_dlpack(t.__dlpack__(copy=True))
    assert not copied.shares_storage_with(t)
    np.testing.assert_array_equal(copied.numpy(), [0, 1, 2, 3])


def test_to_cpu_and_dtype(ferry):
    t = ferry.from_dlpack(np.array([[0, 255], [7, 9]], dtype=np.uint8))
    assert t.to("cpu").shares_storage_with(t)
    assert t.cpu().shares_storage_with(t)
    assert t.to("u8").shares_storage_with(t)
    f = t.to("f32")
    assert f.dtype == "f32" and not f.shares_storage_with(t)
    np.testing.assert_array_equal(f.numpy(), [[0.0, 255.0], [7.0, 9.0]])
    g = t.to("cpu", "f64")
    assert g.dtype == "f64"
    h = t.to(ferry.Device("cpu"), dtype=np.float16)
    assert h.dtype == "f16"
    p = t.pin_memory()
    assert p.is_pinned and not t.is_pinned
    np.testing.assert_array_equal(p.numpy(), t.numpy())
    with pytest.raises(ferry.ConfigError):
        t.to("q9")


def test_devices(ferry):
    assert str(ferry.Device("cuda")) == "cuda:0"
    assert ferry.Device("cuda:1").index == 1 and ferry.Device("cuda:1").type == "cuda"
    assert ferry.Device("cpu").index is None
    assert ferry.Device("cpu") == ferry.Device.cpu()
    assert {ferry.Device("cuda:0"), ferry.Device.cuda(0)} == {ferry.Device("cuda:0")}
    assert repr(ferry.Device("cpu")) == "ferry.Device('cpu')"
    best = ferry.Device.best()
    assert best == (ferry.Device("cuda:0") if ferry.cuda_device_count() > 0 else ferry.Device.cpu())
    with pytest.raises(ferry.ConfigError, match="gpu:0"):
        ferry.Device("gpu:0")
    if ferry.cuda_device_count() == 0:
        assert ferry.cuda_unavailable_reason() != ""
        with pytest.raises(ferry.DeviceError):
            ferry.zeros([2], device="cuda")


def test_errors_are_one_family(ferry):
    for cls in (ferry.DataError, ferry.ConfigError, ferry.DeviceError):
        assert issubclass(cls, ferry.Error)
    assert issubclass(ferry.Error, RuntimeError)
    with pytest.raises(ferry.ConfigError) as info:
        ferry.empty([-1], "f32")
    assert "-1" in str(info.value)


def test_torch_round_trip(ferry):
    torch = pytest.importorskip("torch")
    x = torch.arange(12, dtype=torch.float32).reshape(3, 4)
    t = ferry.from_dlpack(x)
    assert t.shape == (3, 4) and t.dtype == "f32"
    y = torch.from_dlpack(t)
    assert y.data_ptr() == x.data_ptr() and y.dtype == torch.float32 and y.shape == (3, 4)
    x[0, 0] = 42
    assert t.numpy()[0, 0] == 42
    b = torch.arange(4, dtype=torch.bfloat16)
    tb = ferry.from_dlpack(b)
    assert tb.dtype == "bf16"
    assert torch.equal(torch.from_dlpack(tb), b)
    with pytest.raises(TypeError, match="bfloat16"):
        tb.numpy()
    del x, y
    gc.collect()
    assert t.numpy()[0, 0] == 42
