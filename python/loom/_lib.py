"""Finding libloom, declaring its C ABI for ctypes, and turning failures
into loom.Error.

Only the public API of include/loom/*.h is used. Options structs are mirrored
here; each starts with its struct_size, and the mirrors are checked against
the sizes loom's loom_X_options_init functions write when the library is
loaded, so a layout drift fails at import instead of corrupting memory.

Memory loom hands to the caller (the text of loom_memory_summary, ...) is
declared c_void_p, copied into a Python str and given back with loom_free
(take_string), never with another allocator's free.

ctypes.CDLL releases the GIL around every call, so loom's loader threads can
call back into Python (callback datasets) while the main thread waits in
loom_loader_next.
"""
import ctypes as C
import ctypes.util
import glob
import os
import threading

P = C.c_void_p
ST = C.c_int  # loom_status


class Error(Exception):
    """A failed loom call. `status` is the loom_status code, `status_name`
    its name (e.g. "LOOM_ERR_SHAPE"), and the message is loom's own: what
    failed, where, and what to do."""

    def __init__(self, status, message):
        self.status = int(status)
        self.status_name = _status_name(self.status)
        self.message = message
        super().__init__(f"{message} [{self.status_name}]")


def _status_name(code):
    try:
        return lib.loom_status_name(code).decode()
    except Exception:  # during import errors
        return str(code)


# ---- mirrored structs --------------------------------------------------------------

class Device(C.Structure):
    _fields_ = [("kind", C.c_int32), ("index", C.c_int32)]


class SgdOptions(C.Structure):
    _fields_ = [("struct_size", C.c_size_t), ("lr", C.c_double), ("momentum", C.c_double), ("dampening", C.c_double),
                ("weight_decay", C.c_double), ("nesterov", C.c_bool)]


class AdamwOptions(C.Structure):
    _fields_ = [("struct_size", C.c_size_t), ("lr", C.c_double), ("beta1", C.c_double), ("beta2", C.c_double),
                ("eps", C.c_double), ("weight_decay", C.c_double)]


class LrSchedule(C.Structure):
    _fields_ = [("struct_size", C.c_size_t), ("kind", C.c_int32), ("base_lr", C.c_double), ("warmup_steps", C.c_int64),
                ("step_size", C.c_int64), ("gamma", C.c_double), ("total_steps", C.c_int64), ("min_lr", C.c_double),
                ("div_factor", C.c_double), ("final_div_factor", C.c_double)]


class ScalerOptions(C.Structure):
    _fields_ = [("struct_size", C.c_size_t), ("init_scale", C.c_double), ("growth_factor", C.c_double),
                ("backoff_factor", C.c_double), ("growth_interval", C.c_int64), ("min_scale", C.c_double),
                ("max_scale", C.c_double), ("enabled", C.c_bool)]


class ScalerState(C.Structure):
    _fields_ = [("struct_size", C.c_size_t), ("scale", C.c_double), ("good_steps", C.c_int64), ("steps", C.c_int64),
                ("steps_skipped", C.c_int64), ("last_overflow_step", C.c_int64)]


class LoaderOptions(C.Structure):
    _fields_ = [("struct_size", C.c_size_t), ("batch_size", C.c_int64), ("shuffle", C.c_bool), ("seed", C.c_uint64),
                ("drop_last", C.c_bool), ("workers", C.c_int), ("prefetch", C.c_int), ("rank", C.c_int),
                ("world_size", C.c_int), ("device", Device), ("x_dtype", C.c_int), ("y_dtype", C.c_int),
                ("crop_padding", C.c_int), ("hflip", C.c_bool), ("scale", C.c_float),
                ("mean", C.POINTER(C.c_float)), ("std", C.POINTER(C.c_float)), ("norm_channels", C.c_int),
                ("channels_last", C.c_bool)]


class LoaderStats(C.Structure):
    _fields_ = [("struct_size", C.c_size_t), ("wait_seconds", C.c_double), ("elapsed_seconds", C.c_double),
                ("wait_fraction", C.c_double), ("batches", C.c_int64), ("samples", C.c_int64),
                ("batches_produced", C.c_int64), ("samples_per_second", C.c_double)]


class Conv2dOptions(C.Structure):
    _fields_ = [("struct_size", C.c_size_t), ("stride", C.c_int64 * 2), ("padding", C.c_int64 * 2),
                ("dilation", C.c_int64 * 2), ("groups", C.c_int64), ("act", C.c_int32)]


class BatchNormOptions(C.Structure):
    _fields_ = [("struct_size", C.c_size_t), ("training", C.c_bool), ("momentum", C.c_double), ("eps", C.c_double),
                ("act", C.c_int32)]


class Pool2dOptions(C.Structure):
    _fields_ = [("struct_size", C.c_size_t), ("kernel", C.c_int64 * 2), ("stride", C.c_int64 * 2),
                ("padding", C.c_int64 * 2), ("ceil_mode", C.c_bool), ("count_include_pad", C.c_bool)]


class ResnetOptions(C.Structure):
    _fields_ = [("struct_size", C.c_size_t), ("in_channels", C.c_int64), ("num_classes", C.c_int64),
                ("shortcut", C.c_int32), ("memory_format", C.c_int32), ("zero_init_residual", C.c_bool),
                ("checkpoint_every", C.c_int64)]


class ParamGroupOptions(C.Structure):
    _fields_ = [("struct_size", C.c_size_t), ("lr", C.c_double), ("weight_decay", C.c_double)]


class DistEnv(C.Structure):
    _fields_ = [("struct_size", C.c_size_t), ("launched", C.c_bool), ("rank", C.c_int32), ("world_size", C.c_int32),
                ("local_rank", C.c_int32), ("local_size", C.c_int32), ("launcher", C.c_char_p)]


class CommOptions(C.Structure):
    _fields_ = [("struct_size", C.c_size_t), ("backend", C.c_int32), ("device", Device), ("init", C.c_char_p),
                ("rank", C.c_int32), ("world_size", C.c_int32), ("timeout_s", C.c_double), ("set_threads", C.c_bool)]


class DdpOptions(C.Structure):
    _fields_ = [("struct_size", C.c_size_t), ("first_bucket_mib", C.c_double), ("bucket_mib", C.c_double),
                ("reduce_in_fp32", C.c_bool), ("broadcast_buffers", C.c_bool)]


# A custom module's forward (loom_module_forward_fn): user, module, x -> result.
MODULE_FORWARD_FN = C.CFUNCTYPE(C.c_void_p, C.c_void_p, C.c_void_p, C.c_void_p)
READ_FN = C.CFUNCTYPE(C.c_int, C.c_void_p, C.c_int64, C.c_void_p, C.c_void_p)
DESTROY_FN = C.CFUNCTYPE(None, C.c_void_p)


class DatasetCallbacks(C.Structure):
    _fields_ = [("struct_size", C.c_size_t), ("length", C.c_int64), ("x_dtype", C.c_int), ("x_ndim", C.c_int),
                ("x_shape", C.c_int64 * 8), ("has_y", C.c_bool), ("y_dtype", C.c_int), ("read", READ_FN),
                ("destroy", DESTROY_FN), ("user", C.c_void_p), ("thread_safe", C.c_bool)]


class TrainState(C.Structure):
    _fields_ = [("struct_size", C.c_size_t), ("model", P), ("optimizer", P), ("scaler", P), ("loader", P),
                ("schedule", C.POINTER(LrSchedule)), ("step", C.c_int64)]


class MemoryStat(C.Structure):
    _fields_ = [("current", C.c_int64), ("peak", C.c_int64)]


class MemoryStats(C.Structure):
    _fields_ = ([("struct_size", C.c_size_t)] +
                [(n, MemoryStat * 3) for n in ("allocated_bytes", "reserved_bytes", "active_bytes",
                                               "inactive_split_bytes", "requested_bytes", "allocations", "segments")] +
                [(n, C.c_int64) for n in ("num_allocs", "num_frees", "num_cache_hits", "num_cross_stream_reuses",
                                          "num_device_allocs", "num_device_frees", "num_alloc_retries", "num_ooms",
                                          "limit_bytes", "max_split_size")])


I64P = C.POINTER(C.c_int64)

_SIGNATURES = {
    # status.h, free.h
    "loom_last_error": (C.c_char_p, []),
    "loom_last_status": (ST, []),
    "loom_clear_error": (None, []),
    "loom_status_name": (C.c_char_p, [ST]),
    "loom_free": (None, [C.c_void_p]),
    # dtype.h, rng.h
    "loom_dtype_size": (C.c_size_t, [C.c_int]),
    "loom_manual_seed": (None, [C.c_uint64]),
    "loom_rng_get_state": (None, [C.POINTER(C.c_uint64), C.POINTER(C.c_uint64)]),
    "loom_rng_set_state": (None, [C.c_uint64, C.c_uint64]),
    # device.h
    "loom_device_count": (C.c_int, [C.c_int]),
    "loom_cuda_unavailable_reason": (C.c_char_p, []),
    "loom_device_parse": (ST, [C.c_char_p, C.POINTER(Device)]),
    "loom_device_str": (C.c_char_p, [Device, C.c_char_p, C.c_int]),
    "loom_device_synchronize": (ST, [Device]),
    "loom_build_info": (C.c_char_p, []),
    "loom_stream_current": (P, [Device]),
    "loom_stream_native": (P, [P]),
    # alloc.h
    "loom_memory_stats_get": (ST, [Device, C.POINTER(MemoryStats)]),
    "loom_memory_summary": (C.c_void_p, [Device]),  # loom_free (take_string)
    "loom_memory_snapshot_json": (C.c_void_p, [Device]),
    "loom_empty_cache": (ST, [Device]),
    # tensor.h
    "loom_scope_begin": (None, []),
    "loom_scope_end": (None, []),
    "loom_keep": (P, [P]),
    "loom_scope_depth": (C.c_int, []),
    "loom_tensor_retain": (P, [P]),
    "loom_tensor_release": (None, [P]),
    "loom_empty": (P, [C.c_int, I64P, C.c_int, Device]),
    "loom_tensor_ndim": (C.c_int, [P]),
    "loom_tensor_shape": (I64P, [P]),
    "loom_tensor_strides": (I64P, [P]),
    "loom_tensor_numel": (C.c_int64, [P]),
    "loom_tensor_dtype": (C.c_int, [P]),
    "loom_tensor_device": (Device, [P]),
    "loom_tensor_is_contiguous": (C.c_bool, [P]),
    "loom_tensor_data": (C.c_void_p, [P]),
    "loom_set_grad_enabled": (C.c_bool, [C.c_bool]),
    "loom_is_grad_enabled": (C.c_bool, []),
    "loom_requires_grad": (C.c_bool, [P]),
    "loom_grad": (P, [P]),
    # ops.h
    "loom_zeros": (P, [C.c_int, I64P, C.c_int, Device]),
    "loom_ones": (P, [C.c_int, I64P, C.c_int, Device]),
    "loom_full": (P, [C.c_int, I64P, C.c_double, C.c_int, Device]),
    "loom_from_host": (P, [C.c_void_p, C.c_int, I64P, C.c_int, Device]),
    "loom_arange": (P, [C.c_double, C.c_double, C.c_double, C.c_int, Device]),
    "loom_rand": (P, [C.c_int, I64P, C.c_int, Device]),
    "loom_randn": (P, [C.c_int, I64P, C.c_int, Device]),
    "loom_view": (P, [P, C.c_int, I64P]),
    "loom_reshape": (P, [P, C.c_int, I64P]),
    "loom_transpose": (P, [P, C.c_int, C.c_int]),
    "loom_permute": (P, [P, C.POINTER(C.c_int)]),
    "loom_slice": (P, [P, C.c_int, C.c_int64, C.c_int64, C.c_int64]),
    "loom_expand": (P, [P, C.c_int, I64P]),
    "loom_contiguous": (P, [P]),
    "loom_detach": (P, [P]),
    "loom_to_device": (P, [P, Device]),
    "loom_cast": (P, [P, C.c_int]),
    "loom_clone": (P, [P]),
    "loom_copy_": (ST, [P, P]),
    "loom_fill_": (ST, [P, C.c_double]),
    "loom_to_host": (ST, [P, C.c_void_p, C.c_size_t, C.c_int]),
    "loom_item": (ST, [P, C.POINTER(C.c_double)]),
    "loom_add": (P, [P, P]), "loom_sub": (P, [P, P]), "loom_mul": (P, [P, P]), "loom_div": (P, [P, P]),
    "loom_add_scalar": (P, [P, C.c_double]), "loom_mul_scalar": (P, [P, C.c_double]),
    "loom_rsub_scalar": (P, [P, C.c_double]), "loom_rdiv_scalar": (P, [P, C.c_double]),
    "loom_pow_scalar": (P, [P, C.c_double]),
    "loom_neg": (P, [P]), "loom_exp": (P, [P]), "loom_log": (P, [P]), "loom_sqrt": (P, [P]), "loom_relu": (P, [P]),
    "loom_sum": (P, [P, C.c_int, C.POINTER(C.c_int), C.c_bool]),
    "loom_mean": (P, [P, C.c_int, C.POINTER(C.c_int), C.c_bool]),
    "loom_max": (P, [P, C.c_int, C.POINTER(C.c_int), C.c_bool]),
    "loom_argmax": (P, [P, C.c_int, C.c_bool]),
    "loom_matmul": (P, [P, P]),
    "loom_matmul_ex": (P, [P, P, C.c_bool, C.c_bool]),
    "loom_linear": (P, [P, P, P, C.c_int]),
    "loom_log_softmax": (P, [P, C.c_int]),
    "loom_cross_entropy": (P, [P, P]),
    "loom_accuracy": (ST, [P, P, C.POINTER(C.c_double)]),
    "loom_count_correct": (ST, [P, P, I64P]),
    "loom_set_num_threads": (None, [C.c_int]),
    "loom_get_num_threads": (C.c_int, []),
    "loom_set_allow_tf32": (None, [C.c_bool]),
    "loom_cpu_isa": (C.c_char_p, []),
    "loom_cpu_gemm_name": (C.c_char_p, []),
    "loom_cat": (P, [C.c_int, C.POINTER(P), C.c_int]),
    "loom_tensor_dim": (C.c_int64, [P, C.c_int]),
    "loom_conv2d_options_init": (None, [C.c_void_p]),
    "loom_conv2d": (P, [P, P, P, C.POINTER(Conv2dOptions)]),
    "loom_batch_norm_options_init": (None, [C.c_void_p]),
    "loom_batch_norm": (P, [P, P, P, P, P, C.POINTER(BatchNormOptions)]),
    "loom_pool2d_options_init": (None, [C.c_void_p, C.c_int64, C.c_int64]),
    "loom_max_pool2d": (P, [P, C.POINTER(Pool2dOptions)]),
    "loom_avg_pool2d": (P, [P, C.POINTER(Pool2dOptions)]),
    "loom_adaptive_avg_pool2d": (P, [P, C.c_int64, C.c_int64]),
    "loom_dropout": (P, [P, C.c_double, C.c_bool]),
    "loom_flatten": (P, [P, C.c_int, C.c_int]),
    "loom_add_relu": (P, [P, P]),
    "loom_to_memory_format": (P, [P, C.c_int]),
    "loom_tensor_memory_format": (C.c_int, [P]),
    # autograd.h
    "loom_backward": (ST, [P]),
    "loom_backward_with": (ST, [P, P]),
    "loom_zero_grad": (ST, [P]),
    "loom_set_requires_grad": (ST, [P, C.c_bool]),
    # nn.h
    "loom_linear_new": (P, [C.c_int64, C.c_int64, C.c_bool, C.c_int, Device]),
    "loom_relu_new": (P, []),
    "loom_sequential_new": (P, []),
    "loom_sequential_add": (ST, [P, P]),
    "loom_mlp_new": (P, [C.c_int64, C.c_int, I64P, C.c_int64, Device]),
    "loom_module_forward": (P, [P, P]),
    "loom_module_name": (C.c_char_p, [P]),
    "loom_module_num_children": (C.c_int, [P]),
    "loom_module_child": (P, [P, C.c_int]),
    "loom_module_num_params": (C.c_int, [P]),
    "loom_module_param": (P, [P, C.c_int]),
    "loom_module_param_name": (C.c_char_p, [P, C.c_int, C.c_char_p, C.c_size_t]),
    "loom_module_num_buffers": (C.c_int, [P]),
    "loom_module_buffer": (P, [P, C.c_int]),
    "loom_module_buffer_name": (C.c_char_p, [P, C.c_int, C.c_char_p, C.c_size_t]),
    "loom_module_train": (ST, [P, C.c_bool]),
    "loom_module_is_training": (C.c_bool, [P]),
    "loom_module_free": (None, [P]),
    "loom_init_": (ST, [P, C.c_int, C.c_int64, C.c_int64]),
    "loom_conv2d_new": (P, [C.c_int64, C.c_int64, C.c_int64, C.c_int64, C.POINTER(Conv2dOptions), C.c_bool, C.c_int,
                            Device]),
    "loom_batch_norm2d_new": (P, [C.c_int64, C.POINTER(BatchNormOptions), C.c_bool, Device]),
    "loom_max_pool2d_new": (P, [C.POINTER(Pool2dOptions)]),
    "loom_avg_pool2d_new": (P, [C.POINTER(Pool2dOptions)]),
    "loom_adaptive_avg_pool2d_new": (P, [C.c_int64, C.c_int64]),
    "loom_dropout_new": (P, [C.c_double]),
    "loom_flatten_new": (P, [C.c_int, C.c_int]),
    "loom_resnet_options_init": (None, [C.c_void_p, C.c_int]),
    "loom_resnet_parse": (ST, [C.c_char_p, C.POINTER(C.c_int)]),
    "loom_resnet_new": (P, [C.c_int, C.POINTER(ResnetOptions), Device]),
    "loom_resnet_set_memory_format": (ST, [P, C.c_int]),
    "loom_module_set_checkpoint": (ST, [P, C.c_bool]),
    "loom_module_split_decay": (ST, [P, C.POINTER(P), C.POINTER(C.c_int), C.POINTER(P), C.POINTER(C.c_int)]),
    "loom_module_num_param_elements": (C.c_int64, [P]),
    "loom_module_new": (P, [C.c_char_p, MODULE_FORWARD_FN, C.c_void_p, C.c_void_p]),
    "loom_module_register_parameter": (ST, [P, C.c_char_p, P]),
    "loom_module_register_buffer": (ST, [P, C.c_char_p, P]),
    "loom_module_register_module": (ST, [P, C.c_char_p, P]),
    "loom_module_fail": (P, [ST, C.c_char_p]),
    # optim.h
    "loom_sgd_options_init": (None, [C.c_void_p]),
    "loom_adamw_options_init": (None, [C.c_void_p]),
    "loom_sgd_new": (P, [C.POINTER(P), C.c_int, C.POINTER(SgdOptions)]),
    "loom_adamw_new": (P, [C.POINTER(P), C.c_int, C.POINTER(AdamwOptions)]),
    "loom_optimizer_step": (ST, [P]),
    "loom_optimizer_zero_grad": (ST, [P]),
    "loom_optimizer_set_lr": (None, [P, C.c_double]),
    "loom_optimizer_get_lr": (C.c_double, [P]),
    "loom_optimizer_steps": (C.c_int64, [P]),
    "loom_optimizer_free": (None, [P]),
    "loom_param_group_options_init": (None, [C.c_void_p]),
    "loom_optimizer_add_param_group": (ST, [P, C.POINTER(P), C.c_int, C.POINTER(ParamGroupOptions)]),
    "loom_optimizer_num_groups": (C.c_int, [P]),
    "loom_optimizer_group_num_params": (C.c_int, [P, C.c_int]),
    "loom_optimizer_set_group_lr": (ST, [P, C.c_int, C.c_double]),
    "loom_optimizer_get_group_lr": (C.c_double, [P, C.c_int]),
    "loom_optimizer_set_group_weight_decay": (ST, [P, C.c_int, C.c_double]),
    "loom_optimizer_get_group_weight_decay": (C.c_double, [P, C.c_int]),
    "loom_sgd_new_for_module": (P, [P, C.POINTER(SgdOptions)]),
    "loom_adamw_new_for_module": (P, [P, C.POINTER(AdamwOptions)]),
    "loom_lr_constant": (LrSchedule, [C.c_double]),
    "loom_lr_step": (LrSchedule, [C.c_double, C.c_int64, C.c_double]),
    "loom_lr_cosine": (LrSchedule, [C.c_double, C.c_int64, C.c_int64, C.c_double]),
    "loom_lr_one_cycle": (LrSchedule, [C.c_double, C.c_int64, C.c_int64, C.c_double, C.c_double]),
    "loom_lr_at": (C.c_double, [C.POINTER(LrSchedule), C.c_int64]),
    "loom_optimizer_set_schedule": (ST, [P, C.POINTER(LrSchedule), C.c_int64]),
    # amp.h
    "loom_precision_parse": (ST, [C.c_char_p, C.POINTER(C.c_int)]),
    "loom_precision_name": (C.c_char_p, [C.c_int]),
    "loom_module_set_precision": (ST, [P, C.c_int, C.c_bool]),
    "loom_module_get_precision": (C.c_int, [P]),
    "loom_module_refresh_lowp": (ST, [P]),
    "loom_scaler_options_init": (None, [C.c_void_p]),
    "loom_scaler_new": (P, [C.POINTER(ScalerOptions)]),
    "loom_scaler_free": (None, [P]),
    "loom_scaler_scale": (P, [P, P]),
    "loom_scaler_unscale": (ST, [P, P, C.POINTER(C.c_bool)]),
    "loom_scaler_step": (ST, [P, P, C.POINTER(C.c_bool)]),
    "loom_scaler_get_scale": (C.c_double, [P]),
    "loom_scaler_steps": (C.c_int64, [P]),
    "loom_scaler_steps_skipped": (C.c_int64, [P]),
    "loom_scaler_state_save": (ST, [P, C.POINTER(ScalerState)]),
    "loom_scaler_state_restore": (ST, [P, C.POINTER(ScalerState)]),
    # data.h
    "loom_dataset_idx_open": (P, [C.c_char_p, C.c_char_p]),
    "loom_dataset_memory": (P, [C.c_void_p, C.c_int, C.c_int, I64P, C.c_void_p, C.c_int, C.c_int64, C.c_bool]),
    "loom_dataset_callback": (P, [C.POINTER(DatasetCallbacks)]),
    "loom_dataset_fail": (ST, [ST, C.c_char_p]),
    "loom_dataset_length": (C.c_int64, [P]),
    "loom_dataset_x_info": (ST, [P, C.POINTER(C.c_int), C.POINTER(C.c_int), I64P]),
    "loom_dataset_y_info": (ST, [P, C.POINTER(C.c_bool), C.POINTER(C.c_int)]),
    "loom_dataset_read": (ST, [P, C.c_int64, C.c_void_p, C.c_void_p]),
    "loom_dataset_release": (None, [P]),
    "loom_loader_options_init": (None, [C.c_void_p]),
    "loom_loader_new": (P, [P, C.POINTER(LoaderOptions)]),
    "loom_loader_next": (ST, [P, C.POINTER(P), C.POINTER(P)]),
    "loom_loader_next_into": (ST, [P, P, P, I64P]),
    "loom_loader_start_epoch": (ST, [P, C.c_int64]),
    "loom_loader_epoch": (C.c_int64, [P]),
    "loom_loader_position": (ST, [P, I64P, I64P]),
    "loom_loader_seek": (ST, [P, C.c_int64, C.c_int64]),
    "loom_loader_num_batches": (C.c_int64, [P]),
    "loom_loader_num_samples": (C.c_int64, [P]),
    "loom_loader_stats_get": (ST, [P, C.POINTER(LoaderStats)]),
    "loom_loader_stats_reset": (None, [P]),
    "loom_loader_free": (None, [P]),
    # io.h
    "loom_safetensors_save": (ST, [C.c_char_p, C.c_int, C.POINTER(C.c_char_p), C.POINTER(P), C.c_int,
                                   C.POINTER(C.c_char_p), C.POINTER(C.c_char_p)]),
    "loom_safetensors_open": (P, [C.c_char_p]),
    "loom_safetensors_close": (None, [P]),
    "loom_safetensors_num_tensors": (C.c_int, [P]),
    "loom_safetensors_name": (C.c_char_p, [P, C.c_int]),
    "loom_safetensors_find": (C.c_int, [P, C.c_char_p]),
    "loom_safetensors_dtype_name": (C.c_char_p, [P, C.c_int]),
    "loom_safetensors_info": (ST, [P, C.c_int, C.POINTER(C.c_int), C.POINTER(C.c_int), I64P]),
    "loom_safetensors_get": (P, [P, C.c_char_p, Device]),
    "loom_safetensors_num_metadata": (C.c_int, [P]),
    "loom_safetensors_metadata_key": (C.c_char_p, [P, C.c_int]),
    "loom_safetensors_metadata": (C.c_char_p, [P, C.c_char_p]),
    "loom_checkpoint_save": (ST, [C.c_char_p, C.POINTER(TrainState)]),
    "loom_checkpoint_restore": (ST, [C.c_char_p, C.POINTER(TrainState)]),
    "loom_to_dlpack": (P, [P]),
    "loom_to_dlpack_versioned": (P, [P]),
    "loom_from_dlpack": (P, [P]),
    "loom_from_dlpack_versioned": (P, [P]),
    "loom_dlpack_device": (ST, [P, C.POINTER(C.c_int32), C.POINTER(C.c_int32)]),
    "loom_dlpack_sync_stream": (ST, [Device, C.c_ssize_t]),
    "loom_dlpack_pycapsule_destructor": (None, [P]),
    # dist.h
    "loom_dist_env_get": (ST, [C.POINTER(DistEnv)]),
    "loom_dist_have_mpi": (C.c_bool, []),
    "loom_dist_have_nccl": (C.c_bool, []),
    "loom_comm_options_init": (None, [C.c_void_p]),
    "loom_comm_init": (ST, [C.POINTER(CommOptions), C.POINTER(P)]),
    "loom_comm_free": (None, [P]),
    "loom_comm_rank": (C.c_int, [P]),
    "loom_comm_size": (C.c_int, [P]),
    "loom_comm_local_rank": (C.c_int, [P]),
    "loom_comm_local_size": (C.c_int, [P]),
    "loom_comm_device": (Device, [P]),
    "loom_comm_get_backend": (C.c_int, [P]),
    "loom_comm_backend_name": (C.c_char_p, [C.c_int]),
    "loom_comm_all_reduce": (ST, [P, P, C.c_int]),
    "loom_comm_broadcast": (ST, [P, P, C.c_int]),
    "loom_comm_all_gather": (ST, [P, P, P]),
    "loom_comm_barrier": (ST, [P]),
    "loom_comm_wait": (ST, [P]),
    "loom_comm_synchronize": (ST, [P]),
    "loom_dist_default_threads": (C.c_int, [P]),
    "loom_dist_finalize": (ST, []),
    "loom_ddp_options_init": (None, [C.c_void_p]),
    "loom_ddp_new": (P, [P, P, C.POINTER(DdpOptions)]),
    "loom_ddp_free": (None, [P]),
    "loom_ddp_set_sync": (ST, [P, C.c_bool]),
    "loom_ddp_get_sync": (C.c_bool, [P]),
    "loom_ddp_sync": (ST, [P]),
    "loom_ddp_attach_scaler": (ST, [P, P]),
    "loom_ddp_broadcast_buffers": (ST, [P]),
    "loom_lr_scale_for_world": (LrSchedule, [LrSchedule, C.c_int, C.c_int64]),
}


def _candidates():
    env = os.environ.get("LOOM_LIBRARY")
    if env:
        yield os.path.join(env, "libloom.so") if os.path.isdir(env) else env
        return  # an explicit choice: never fall back silently
    here = os.path.dirname(os.path.abspath(__file__))
    yield os.path.join(here, "libloom.so")
    root = os.path.dirname(os.path.dirname(here))  # python/loom -> the source tree
    for cand in sorted(glob.glob(os.path.join(root, "build*", "lib", "libloom.so"))):
        yield cand
    found = ctypes.util.find_library("loom")
    yield found or "libloom.so.0"


def _passive_openmp():
    """OpenMP workers that spin between parallel regions take the cores loom's
    loader threads and other processes need (loom-resnet's step: 1.3 s
    passive vs 53 s spinning on 2 busy cores). libgomp reads its wait policy
    once, when it is loaded: before libloom, unless the user chose one
    (OMP_WAIT_POLICY=ACTIVE restores spinning), as loom's C trainers do."""
    if "OMP_WAIT_POLICY" not in os.environ and "GOMP_SPINCOUNT" not in os.environ:
        os.environ["OMP_WAIT_POLICY"] = "PASSIVE"


def _load():
    _passive_openmp()
    tried = []
    for cand in _candidates():
        if os.path.sep in cand and not os.path.exists(cand):
            tried.append(f"{cand} (absent)")
            continue
        try:
            return C.CDLL(cand), cand
        except OSError as e:
            tried.append(f"{cand} ({e})")
            if os.environ.get("LOOM_LIBRARY"):
                break
    raise ImportError("loom: cannot load libloom. Build it (cmake -S . -B build && cmake --build build) and set "
                      "LOOM_LIBRARY=/path/to/libloom.so, or reinstall the package from a tree with build/lib/libloom.so."
                      " Tried: " + "; ".join(tried))


lib, library_path = _load()
for _name, (_res, _args) in _SIGNATURES.items():
    _fn = getattr(lib, _name)
    _fn.restype, _fn.argtypes = _res, _args


# Each mirrored options struct and the loom_X_options_init that fills it.
_INITS = {SgdOptions: lib.loom_sgd_options_init, AdamwOptions: lib.loom_adamw_options_init,
          ScalerOptions: lib.loom_scaler_options_init, LoaderOptions: lib.loom_loader_options_init,
          Conv2dOptions: lib.loom_conv2d_options_init, BatchNormOptions: lib.loom_batch_norm_options_init,
          Pool2dOptions: lambda o: lib.loom_pool2d_options_init(o, 1, 1),
          ResnetOptions: lambda o: lib.loom_resnet_options_init(o, 0),
          ParamGroupOptions: lib.loom_param_group_options_init, CommOptions: lib.loom_comm_options_init,
          DdpOptions: lib.loom_ddp_options_init}


def _check_layouts():
    for cls, init in _INITS.items():
        buf = (C.c_char * 4096)()  # room for a library newer than the mirror
        init(buf)
        lib_size = C.cast(buf, C.POINTER(C.c_size_t))[0]
        if lib_size != C.sizeof(cls):
            raise ImportError(f"loom: the Python mirror of {cls.__name__} is {C.sizeof(cls)} bytes but this libloom's "
                              f"is {lib_size}: the package and the library are from different versions")
    sched = lib.loom_lr_constant(1.0)
    if sched.struct_size != C.sizeof(LrSchedule):
        raise ImportError(f"loom: the Python mirror of LrSchedule is {C.sizeof(LrSchedule)} bytes but this libloom's "
                          f"is {sched.struct_size}: the package and the library are from different versions")


_check_layouts()


def options(cls, *args):
    """A mirrored options struct holding loom's defaults (its loom_X_options_init;
    args: what that init takes besides the struct, e.g. a pool's kernel)."""
    o = cls()
    init = {Pool2dOptions: lib.loom_pool2d_options_init, ResnetOptions: lib.loom_resnet_options_init}.get(cls)
    if init is not None and args:
        init(C.byref(o), *args)
    else:
        _INITS[cls](C.byref(o))
    return o


def sized(cls, **fields):
    """A struct the caller sizes (statistics, train state): struct_size set."""
    return cls(struct_size=C.sizeof(cls), **fields)


def take_string(ptr):
    """A char * loom handed over, as a str; the memory goes back through loom_free."""
    if not ptr:
        raise last_error()
    try:
        return C.string_at(ptr).decode(errors="replace")
    finally:
        lib.loom_free(ptr)


# Per thread: whether loom scopes own the tensors ops make now (a custom
# module's forward called from C runs inside one: see nn/module.py), and a
# Python exception raised inside such a callback, with the loom message it
# was turned into, to be re-raised as itself when the failure reaches Python.
state = threading.local()


def last_error():
    msg = (lib.loom_last_error() or b"").decode(errors="replace")
    pending = getattr(state, "pending", None)
    if pending is not None:
        state.pending = None
        if pending[1] == msg:
            return pending[0]
    return Error(lib.loom_last_status(), msg)


def check(status):
    """Raise loom.Error for a failed loom_status."""
    if status != 0:
        raise last_error()


def scoped(fn, *args):
    """fn(*args) inside a loom scope, keeping only its result: composite
    calls (a module's forward) make intermediates that belong to the scope
    and die at its end, as in C. Returns the caller-owned result (or NULL)."""
    lib.loom_scope_begin()
    try:
        h = fn(*args)
        if h:
            lib.loom_keep(h)
        return h
    finally:
        lib.loom_scope_end()


def check_handle(handle):
    """Raise loom.Error when a handle-returning call gave NULL."""
    if not handle:
        raise last_error()
    return handle
