"""Mixed precision: the dynamic loss scaler (set a model's policy with
Module.set_precision)."""
import ctypes as C

from ._lib import ScalerOptions, ScalerState, check, check_handle, lib, options, sized
from .tensor import Tensor


class GradScaler:
    """loss = scaler.scale(loss); loss.backward(); skipped = scaler.step(optimizer)."""

    def __init__(self, init_scale=65536.0, growth_factor=2.0, backoff_factor=0.5, growth_interval=2000,
                 min_scale=1.0, max_scale=16777216.0, enabled=True):
        o = options(ScalerOptions)
        o.init_scale, o.growth_factor, o.backoff_factor = init_scale, growth_factor, backoff_factor
        o.growth_interval, o.min_scale, o.max_scale, o.enabled = growth_interval, min_scale, max_scale, enabled
        self._h = check_handle(lib.loom_scaler_new(C.byref(o)))

    def __del__(self):
        h, self._h = getattr(self, "_h", None), None
        if h and lib is not None:
            lib.loom_scaler_free(h)

    @property
    def handle(self):
        return self._h

    def scale(self, loss):
        return Tensor(lib.loom_scaler_scale(self._h, loss.handle))

    def unscale_(self, optimizer):
        """Unscale now (e.g. before clipping); returns whether a gradient is inf/NaN."""
        inf = C.c_bool()
        check(lib.loom_scaler_unscale(self._h, optimizer.handle, C.byref(inf)))
        return inf.value

    def step(self, optimizer):
        """The optimizer step unless a gradient overflowed; returns True when skipped."""
        skipped = C.c_bool()
        check(lib.loom_scaler_step(self._h, optimizer.handle, C.byref(skipped)))
        return skipped.value

    def get_scale(self):
        return lib.loom_scaler_get_scale(self._h)

    @property
    def steps_skipped(self):
        return lib.loom_scaler_steps_skipped(self._h)

    def state_dict(self):
        s = sized(ScalerState)
        check(lib.loom_scaler_state_save(self._h, C.byref(s)))
        return {k: getattr(s, k) for k, _ in ScalerState._fields_ if k != "struct_size"}

    def load_state_dict(self, d):
        s = sized(ScalerState, **d)
        check(lib.loom_scaler_state_restore(self._h, C.byref(s)))
