"""Optimizers (SGD, AdamW) with parameter groups, and learning-rate schedules.

    opt = loom.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    opt = loom.optim.AdamW([{"params": decay, "weight_decay": 0.05},
                            {"params": no_decay, "weight_decay": 0.0}], lr=1e-3)
    opt = loom.optim.SGD.for_module(model, lr=0.1, momentum=0.9, weight_decay=5e-4)  # BN/bias without decay

Groups are PyTorch's param_groups: each has its own lr and weight_decay (the
other hyper-parameters are the optimizer's); opt.param_groups[g]["lr"] reads
and sets them. The optimizer borrows the parameter tensors (it keeps the
Python objects alive).
"""
import ctypes as C

from ._lib import AdamwOptions, ParamGroupOptions, SgdOptions, check, check_handle, lib, options


def _param_array(params):
    params = list(params)
    return params, (C.c_void_p * max(len(params), 1))(*[p.handle for p in params])


def _groups(params):
    """[{"params": [...], ...}, ...] from a list of tensors or of group dicts."""
    params = list(params)
    if params and isinstance(params[0], dict):
        groups = [dict(g) for g in params]
        for g in groups:
            g["params"] = list(g["params"])
        return groups
    return [{"params": params}]


class ParamGroup:
    """One parameter group: its params, and lr / weight_decay live in loom
    (g["lr"] = 0.01 sets it)."""

    def __init__(self, opt, index, params):
        self._opt, self.index, self.params = opt, index, params

    @property
    def lr(self):
        return lib.loom_optimizer_get_group_lr(self._opt._h, self.index)

    @lr.setter
    def lr(self, value):
        check(lib.loom_optimizer_set_group_lr(self._opt._h, self.index, float(value)))

    @property
    def weight_decay(self):
        return lib.loom_optimizer_get_group_weight_decay(self._opt._h, self.index)

    @weight_decay.setter
    def weight_decay(self, value):
        check(lib.loom_optimizer_set_group_weight_decay(self._opt._h, self.index, float(value)))

    def __getitem__(self, key):
        if key == "params":
            return self.params
        if key in ("lr", "weight_decay"):
            return getattr(self, key)
        raise KeyError(key)

    def __setitem__(self, key, value):
        if key not in ("lr", "weight_decay"):
            raise KeyError(f"a parameter group sets lr and weight_decay, not {key!r}")
        setattr(self, key, value)

    def __repr__(self):
        return f"ParamGroup({len(self.params)} params, lr={self.lr:g}, weight_decay={self.weight_decay:g})"


class Optimizer:
    def __init__(self, handle, groups):
        self._h = check_handle(handle)
        self._groups = [ParamGroup(self, 0, groups[0]["params"])]
        for g in groups[1:]:
            self.add_param_group(g)

    @classmethod
    def _made(cls, handle, model, weight_decay):
        """An optimizer loom_X_new_for_module made, with its two groups' tensors."""
        self = cls.__new__(cls)
        self._h = check_handle(handle)
        self._groups = [ParamGroup(self, i, g["params"]) for i, g in enumerate(param_groups(model, weight_decay))]
        return self

    def __del__(self):
        h, self._h = getattr(self, "_h", None), None
        if h and lib is not None:
            lib.loom_optimizer_free(h)

    @property
    def handle(self):
        return self._h

    def add_param_group(self, group):
        """Append {"params": [...], "lr": ..., "weight_decay": ...} (lr: group
        0's current one when absent; weight_decay: the optimizer's)."""
        params, arr = _param_array(group["params"])
        o = options(ParamGroupOptions)
        if "lr" in group:
            o.lr = group["lr"]
        if "weight_decay" in group:
            o.weight_decay = group["weight_decay"]
        check(lib.loom_optimizer_add_param_group(self._h, arr, len(params), C.byref(o)))
        self._groups.append(ParamGroup(self, len(self._groups), params))

    @property
    def param_groups(self):
        return list(self._groups)

    def step(self):
        check(lib.loom_optimizer_step(self._h))

    def zero_grad(self):
        check(lib.loom_optimizer_zero_grad(self._h))

    @property
    def lr(self):
        """Group 0's lr; setting it sets every group's (what a schedule does)."""
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


def split_decay(model):
    """(decay, no_decay): the weights of convolutions and linear layers, and
    the parameters of batch norms with every bias (loom_module_split_decay)."""
    n = lib.loom_module_num_params(model.handle)
    d, nd = (C.c_void_p * max(n, 1))(), (C.c_void_p * max(n, 1))()
    cd, cnd = C.c_int(), C.c_int()
    check(lib.loom_module_split_decay(model.handle, d, C.byref(cd), nd, C.byref(cnd)))
    by_handle = {p.handle: p for p in model.parameters()}
    return [by_handle[d[i]] for i in range(cd.value)], [by_handle[nd[i]] for i in range(cnd.value)]


def param_groups(model, weight_decay):
    """PyTorch-style groups for model: weight decay on conv/linear weights
    only (what SGD.for_module / AdamW.for_module make)."""
    decay, no_decay = split_decay(model)
    return [g for g in ({"params": decay, "weight_decay": weight_decay}, {"params": no_decay, "weight_decay": 0.0})
            if g["params"]]


class SGD(Optimizer):
    def __init__(self, params, lr=0.01, momentum=0.0, dampening=0.0, weight_decay=0.0, nesterov=False):
        groups = _groups(params)
        first, arr = _param_array(groups[0]["params"])
        o = self._options(lr, momentum, dampening, weight_decay, nesterov)
        o.lr, o.weight_decay = groups[0].get("lr", lr), groups[0].get("weight_decay", weight_decay)
        super().__init__(lib.loom_sgd_new(arr, len(first), C.byref(o)), groups)

    @staticmethod
    def _options(lr, momentum, dampening, weight_decay, nesterov):
        o = options(SgdOptions)
        o.lr, o.momentum, o.dampening, o.weight_decay, o.nesterov = lr, momentum, dampening, weight_decay, nesterov
        return o

    @classmethod
    def for_module(cls, model, lr=0.01, momentum=0.0, dampening=0.0, weight_decay=0.0, nesterov=False):
        """SGD over model's parameters in two groups: conv/linear weights with
        weight_decay, batch-norm parameters and biases without
        (loom_sgd_new_for_module)."""
        o = cls._options(lr, momentum, dampening, weight_decay, nesterov)
        return cls._made(lib.loom_sgd_new_for_module(model.handle, C.byref(o)), model, weight_decay)


class AdamW(Optimizer):
    def __init__(self, params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.01):
        groups = _groups(params)
        first, arr = _param_array(groups[0]["params"])
        o = self._options(lr, betas, eps, weight_decay)
        o.lr, o.weight_decay = groups[0].get("lr", lr), groups[0].get("weight_decay", weight_decay)
        super().__init__(lib.loom_adamw_new(arr, len(first), C.byref(o)), groups)

    @staticmethod
    def _options(lr, betas, eps, weight_decay):
        o = options(AdamwOptions)
        o.lr, (o.beta1, o.beta2), o.eps, o.weight_decay = lr, betas, eps, weight_decay
        return o

    @classmethod
    def for_module(cls, model, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.01):
        """AdamW in two groups, as SGD.for_module (loom_adamw_new_for_module)."""
        o = cls._options(lr, betas, eps, weight_decay)
        return cls._made(lib.loom_adamw_new_for_module(model.handle, C.byref(o)), model, weight_decay)


class Schedule:
    """A learning-rate schedule: schedule(step) is the rate for a 0-based step."""

    def __init__(self, struct):
        self.struct = struct

    def __call__(self, step):
        return lib.loom_lr_at(C.byref(self.struct), int(step))

    @property
    def base_lr(self):
        return self.struct.base_lr


def constant(lr):
    return Schedule(lib.loom_lr_constant(lr))


def step_lr(lr, step_size, gamma):
    return Schedule(lib.loom_lr_step(lr, step_size, gamma))


def cosine(lr, warmup_steps, total_steps, min_lr=0.0):
    return Schedule(lib.loom_lr_cosine(lr, warmup_steps, total_steps, min_lr))


def one_cycle(max_lr, warmup_steps, total_steps, div_factor=25.0, final_div_factor=1e4):
    """PyTorch's OneCycleLR (anneal_strategy='cos') with pct_start = warmup_steps / total_steps."""
    return Schedule(lib.loom_lr_one_cycle(max_lr, warmup_steps, total_steps, div_factor, final_div_factor))


def scale_for_world(schedule, world_size, warmup_steps):
    """The linear scaling rule for data parallelism: base and min lr times
    world_size, reached by a linear warm-up of at least warmup_steps."""
    return Schedule(lib.loom_lr_scale_for_world(schedule.struct, int(world_size), int(warmup_steps)))
