"""The engine boundary's types (numerics/boundary.py) name exactly what the code accepts: every stack
type, and each Literal the table or tuple that validates the option at run time."""

import importlib
import inspect
import pkgutil
import typing

import posbias.numerics as nx
from posbias import rollout
from posbias.numerics import boundary, engines, masks, semiring, structured


def test_stack_is_every_stack_type_the_package_defines():
    defined = set()
    for info in pkgutil.iter_modules(nx.__path__, prefix="posbias.numerics."):
        module = importlib.import_module(info.name)
        defined |= {
            obj
            for name, obj in vars(module).items()
            if inspect.isclass(obj) and name.endswith("Stack") and obj.__module__ == info.name
        }
    assert set(typing.get_args(boundary.Stack)) == defined
    assert {c.__name__ for c in defined} == {"AlibiStack", "BiasStack", "KernelStack", "PeriodicStack"}


def test_engine_names_are_the_engine_table():
    assert typing.get_args(boundary.EngineName) == engines.NAMES


def test_option_literals_are_the_validated_choices():
    assert typing.get_args(boundary.RingName) == structured.RINGS == tuple(semiring.RINGS)
    assert typing.get_args(boundary.XlaScan) == structured.XLA_SCANS
    assert typing.get_args(boundary.Precision) == rollout.PRECISIONS


def test_mask_names_are_the_masks():
    kinds = typing.get_args(masks.Mask)
    assert len(kinds) == 4
    assert typing.get_args(masks.MaskName) == tuple(kind.name for kind in kinds)
    assert boundary.MaskName is masks.MaskName
