"""Optimizers (SGD, AdamW) and learning-rate schedules."""
import ctypes as C

from ._lib import AdamwOptions, SgdOptions, check, check_handle, lib, options


class Optimizer:
    def __init__(self, handle, params):
        self._params = params  # keeps the parameter tensors alive (loom borrows them)
        self._h = check_handle(handle)

    def __del__(self):
        h, self._h = getattr(self, "_h", None), None
        if h and lib is not None:
            lib.loom_optimizer_free(h)

    @property
    def handle(self):
        return self._h

    def step(self):
        check(lib.loom_optimizer_step(self._h))

    def zero_grad(self):
        check(lib.loom_optimizer_zero_grad(self._h))

    @property
    def lr(self):
        return lib.loom_optimizer_get_lr(self._h)

    @lr.setter
    def lr(self, value):
        lib.loom_optimizer_set_lr(self._h, float(value))

    @property
    def steps(self):
        return lib.loom_optimizer_steps(self._h)

    def set_schedule(self, schedule, step=0):
        """Attach a Schedule (None detaches): every step takes the schedule's
        lr at the next position (from `step`) and moves it on, skipped steps
        included; on a GPU it is evaluated on the device (CUDA graphs)."""
        ref = C.byref(schedule.struct) if schedule is not None else None
        check(lib.loom_optimizer_set_schedule(self._h, ref, int(step)))


def _param_array(params):
    params = list(params)
    return params, (C.c_void_p * max(len(params), 1))(*[p.handle for p in params])


class SGD(Optimizer):
    def __init__(self, params, lr=0.01, momentum=0.0, dampening=0.0, weight_decay=0.0, nesterov=False):
        params, arr = _param_array(params)
        o = options(SgdOptions)
        o.lr, o.momentum, o.dampening, o.weight_decay, o.nesterov = lr, momentum, dampening, weight_decay, nesterov
        super().__init__(lib.loom_sgd_new(arr, len(params), C.byref(o)), params)


class AdamW(Optimizer):
    def __init__(self, params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.01):
        params, arr = _param_array(params)
        o = options(AdamwOptions)
        o.lr, (o.beta1, o.beta2), o.eps, o.weight_decay = lr, betas, eps, weight_decay
        super().__init__(lib.loom_adamw_new(arr, len(params), C.byref(o)), params)


class Schedule:
    """A learning-rate schedule: schedule(step) is the rate for a 0-based step."""

    def __init__(self, struct):
        self.struct = struct

    def __call__(self, step):
        return lib.loom_lr_at(C.byref(self.struct), int(step))


def constant(lr):
    return Schedule(lib.loom_lr_constant(lr))


def step_lr(lr, step_size, gamma):
    return Schedule(lib.loom_lr_step(lr, step_size, gamma))


def cosine(lr, warmup_steps, total_steps, min_lr=0.0):
    return Schedule(lib.loom_lr_cosine(lr, warmup_steps, total_steps, min_lr))


def one_cycle(max_lr, warmup_steps, total_steps, div_factor=25.0, final_div_factor=1e4):
    """PyTorch's OneCycleLR (anneal_strategy='cos') with pct_start = warmup_steps / total_steps."""
    return Schedule(lib.loom_lr_one_cycle(max_lr, warmup_steps, total_steps, div_factor, final_div_factor))
