"""loom.nn.Module and loom.nn.Parameter.

A Module is a loom_module handle. loom's own layers (Linear, Conv2d, ...)
wrap the C constructors; a subclass of your own is a *custom* loom module
(loom_module_new) whose forward is your Python method:

    class Tiny(loom.nn.Module):
        def __init__(self):
            super().__init__()
            self.conv = loom.nn.Conv2d(1, 8, 3, padding=1)   # registered as "conv"
            self.scale = loom.nn.Parameter(loom.ones(8))     # registered as "scale"
        def forward(self, x):
            return loom.relu(self.conv(x)) * self.scale.reshape(1, 8, 1, 1)

Assigning a Module or a Parameter to an attribute registers it with loom
under the attribute's name, in assignment order (as torch.nn.Module does), so
parameter names ("conv.weight"), optimizers, checkpoints, precision policies,
train/eval and data parallelism treat the module like one of loom's own.
Calling the module from Python runs forward directly; loom calls it through
a C callback when the module sits inside one of its containers (a
Sequential) or is checkpointed (set_checkpoint).

Ownership: a module assigned to another (or appended to a Sequential) is
owned by that container's loom module from then on; the Python object keeps
the container alive.
"""
import ctypes as C
import weakref

from .._lib import MODULE_FORWARD_FN, Error, check, check_handle, lib, scoped, state
from ..tensor import Tensor, _t, tensor

_PRECISION = {"fp32": 0, "fp16": 1, "mixed-fp16": 1, "bf16": 2, "mixed-bf16": 2}
_NAME_MAX = 32  # LOOM_MODULE_NAME_MAX: a member's local name, with its NUL

# Custom modules by handle, for the forward callback (weak: the Python object
# owns the module, not the other way round).
_custom = {}


def _forward_from_c(user, handle, x):
    """loom_module_forward_fn of every custom module: runs its Python forward.
    loom opened a scope around the call, which owns the tensors ops make
    now: every Tensor object takes a reference of its own meanwhile
    (state.scoped). A Python exception becomes the loom error of the call and
    is re-raised as itself when the failure reaches Python (_lib.last_error)."""
    prev = getattr(state, "scoped", False)
    state.scoped = True
    ref = _custom.get(handle)
    mod = ref() if ref is not None else None
    try:
        if mod is None:
            raise RuntimeError("the module's Python object is gone")
        y = mod.forward(Tensor(x, borrowed=True))
        if not isinstance(y, Tensor):
            raise TypeError(f"forward returned {type(y).__name__}, not a loom.Tensor")
        return y.handle  # the scope (or y's module) keeps it alive; loom keeps it for the caller
    except BaseException as e:  # noqa: BLE001 - everything goes back through loom's error
        msg = f"{type(mod).__name__ if mod is not None else 'module'}.forward raised {type(e).__name__}: {e}"
        lib.loom_module_fail(10, msg.encode(errors="replace"))
        state.pending = (e, msg)
        return None
    finally:
        state.scoped = prev


_FORWARD = MODULE_FORWARD_FN(_forward_from_c)


class Parameter(Tensor):
    """A leaf tensor that requires grad; assigned to a Module attribute, it
    becomes one of the module's parameters. Made from a Tensor (sharing its
    memory, cut off from its autograd history) or from array-like data."""

    __slots__ = ()

    def __init__(self, data, requires_grad=True):
        src = data if isinstance(data, Tensor) else tensor(data)
        super().__init__(lib.loom_detach(src.handle))
        if requires_grad:
            self.requires_grad = True


class Module:
    """A loom module (see the module docstring for subclassing)."""

    def __init__(self, handle=None):
        custom = handle is None
        if custom:
            handle = lib.loom_module_new(type(self).__name__.encode()[:63], _FORWARD, None, None)
        d = self.__dict__
        d["_h"] = check_handle(handle)
        d["_owner"] = None        # the container that owns our handle, if any
        d["_custom"] = custom
        d["_members"] = {}        # custom: registered name -> Module / Parameter / buffer Tensor
        d["_checkpoint"] = False
        if custom:
            _custom[handle] = weakref.ref(self)

    def __del__(self):
        h = self.__dict__.get("_h")
        self.__dict__["_h"] = None
        if self.__dict__.get("_custom"):
            _custom.pop(h, None)
        if h and self.__dict__.get("_owner") is None and lib is not None:
            lib.loom_module_free(h)

    @property
    def handle(self):
        return self._h

    # ---- registration (custom modules) -------------------------------------------
    def __setattr__(self, name, value):
        if isinstance(value, (Module, Parameter)) and not name.startswith("_"):
            if "_h" not in self.__dict__:
                raise AttributeError(f"cannot assign {name!r} before {type(self).__name__}.__init__ called "
                                     "super().__init__()")
            if not self._custom:
                raise AttributeError(f"{self.name}: loom's own layers take no new members; subclass loom.nn.Module")
            self._register(name, value)
        elif name in self.__dict__.get("_members", ()):
            raise AttributeError(f"{type(self).__name__}.{name} is registered with loom and cannot be reassigned")
        object.__setattr__(self, name, value)

    def __delattr__(self, name):
        if name in self._members:
            raise AttributeError(f"{type(self).__name__}.{name} is registered with loom and cannot be deleted")
        object.__delattr__(self, name)

    def _check_name(self, name):
        if name in self._members:
            raise AttributeError(f"{type(self).__name__}.{name} is registered with loom and cannot be reassigned")
        if "." in name or not name or len(name.encode()) >= _NAME_MAX:
            raise ValueError(f"member name {name!r} must be 1 to {_NAME_MAX - 1} bytes, without '.'")

    def _register(self, name, value):
        self._check_name(name)
        if isinstance(value, Module):
            if value._owner is not None:
                raise ValueError(f"{name}: this module already belongs to a container")
            if value is self or self._inside(value):
                raise ValueError(f"{name}: a module cannot contain itself")
            value._owner = self  # loom owns it from here, also if the call fails
            st = lib.loom_module_register_module(self._h, name.encode(), value._h)
            if st != 0:
                value.__dict__["_h"] = None
                check(st)
        else:
            check(lib.loom_module_register_parameter(self._h, name.encode(), value.handle))
        self._members[name] = value

    def _inside(self, other):
        """Whether self is somewhere in other's tree."""
        return any(m is self or (isinstance(m, Module) and self._inside(m)) for m in other._members.values())

    def register_buffer(self, name, value):
        """Register a tensor the module keeps but does not train (saved in
        checkpoints, broadcast by data parallelism); also sets the attribute."""
        if not self._custom:
            raise AttributeError(f"{self.name}: loom's own layers take no new members; subclass loom.nn.Module")
        value = _t(value)
        self._check_name(name)
        check(lib.loom_module_register_buffer(self._h, name.encode(), value.handle))
        object.__setattr__(self, name, value)
        self._members[name] = value

    # ---- running -----------------------------------------------------------------
    def __call__(self, *args, **kwargs):
        if self._custom and not self._checkpoint:
            return self.forward(*args, **kwargs)
        if len(args) != 1 or kwargs:
            raise TypeError(f"{self.name}: loom's modules take one tensor")
        # In a scope: the layers' intermediate outputs die with it (see _lib.scoped).
        return Tensor(scoped(lib.loom_module_forward, self._h, _t(args[0]).handle))

    def forward(self, x):
        if self._custom:
            raise NotImplementedError(f"{type(self).__name__} must define forward()")
        return self(x)

    def set_checkpoint(self, on=True):
        """Activation checkpointing: forward keeps only its input for backward
        and is run again there (loom_module_set_checkpoint)."""
        check(lib.loom_module_set_checkpoint(self._h, bool(on)))
        self.__dict__["_checkpoint"] = bool(on)
        return self

    # ---- structure -----------------------------------------------------------------
    @property
    def name(self):
        return lib.loom_module_name(self._h).decode()

    def __repr__(self):
        if self._custom:
            kids = [f"  ({n}): " + repr(m).replace("\n", "\n  ") for n, m in self._members.items()
                    if isinstance(m, Module)]
            return type(self).__name__ + ("(\n" + "\n".join(kids) + "\n)" if kids else "()")
        kids = self.children()
        return self.name + ("(" + ", ".join(repr(k) for k in kids) + ")" if kids else "")

    def named_children(self):
        if self._custom:
            return [(n, m) for n, m in self._members.items() if isinstance(m, Module)]
        out = []
        for i in range(lib.loom_module_num_children(self._h)):
            m = Module.__new__(Module)
            m.__dict__.update(_h=lib.loom_module_child(self._h, i), _owner=self, _custom=False, _members={},
                              _checkpoint=False)
            out.append((str(i), m))
        return out

    def children(self):
        return [m for _, m in self.named_children()]

    def _named(self, count, get, name):
        buf = C.create_string_buffer(512)
        out = []
        for i in range(count(self._h)):
            check_handle(name(self._h, i, buf, 512))
            out.append((buf.value.decode(), Tensor(get(self._h, i), borrowed=True)))
        return out

    def named_parameters(self):
        """(dotted name, tensor) in loom's order: a module's own parameters,
        then each child's (PyTorch's names and order)."""
        return self._named(lib.loom_module_num_params, lib.loom_module_param, lib.loom_module_param_name)

    def parameters(self):
        return [t for _, t in self.named_parameters()]

    def named_buffers(self):
        return self._named(lib.loom_module_num_buffers, lib.loom_module_buffer, lib.loom_module_buffer_name)

    def buffers(self):
        return [t for _, t in self.named_buffers()]

    def num_parameters(self):
        """Elements in all parameters."""
        return lib.loom_module_num_param_elements(self._h)

    def state_dict(self):
        """name -> tensor (shared with the module, not copied)."""
        return dict(self.named_parameters() + self.named_buffers())

    def load_state_dict(self, state_dict):
        mine = self.state_dict()
        missing = [k for k in mine if k not in state_dict]
        unexpected = [k for k in state_dict if k not in mine]
        if missing or unexpected:
            raise KeyError(f"load_state_dict: missing {missing}, unexpected {unexpected}")
        for k, t in mine.items():
            t.copy_(state_dict[k])
        check(lib.loom_module_refresh_lowp(self._h))

    def zero_grad(self):
        for p in self.parameters():
            p.zero_grad()

    def train(self, mode=True):
        check(lib.loom_module_train(self._h, bool(mode)))
        return self

    def eval(self):
        return self.train(False)

    @property
    def training(self):
        return bool(lib.loom_module_is_training(self._h))

    def set_precision(self, precision, keep_last_fp32=False):
        """"fp32", "fp16" (mixed, f32 masters) or "bf16" for every Linear and
        Conv2d inside (see loom/amp.h)."""
        if precision not in _PRECISION:
            raise ValueError(f"precision is one of {sorted(_PRECISION)}, got {precision!r}")
        check(lib.loom_module_set_precision(self._h, _PRECISION[precision], bool(keep_last_fp32)))
        return self

    @property
    def precision(self):
        return lib.loom_precision_name(lib.loom_module_get_precision(self._h)).decode()


__all__ = ["Module", "Parameter", "Error"]
