"""loom.nn: modules (loom's own layers, ResNets, and subclasses of
loom.nn.Module of your own) and loom.nn.functional."""
from . import functional
from .layers import (AdaptiveAvgPool2d, AvgPool2d, BatchNorm2d, Conv2d, Dropout, Flatten, Linear, MaxPool2d, MLP, ReLU,
                     Sequential)
from .module import Module, Parameter
from .resnet import (ResNet, resnet18, resnet20, resnet32, resnet34, resnet44, resnet50, resnet56, resnet101, resnet110,
                     resnet152)

__all__ = ["functional", "Module", "Parameter", "Linear", "ReLU", "Sequential", "MLP", "Conv2d", "BatchNorm2d",
           "MaxPool2d", "AvgPool2d", "AdaptiveAvgPool2d", "Dropout", "Flatten", "ResNet", "resnet18", "resnet20",
           "resnet32", "resnet34", "resnet44", "resnet50", "resnet56", "resnet101", "resnet110", "resnet152"]
