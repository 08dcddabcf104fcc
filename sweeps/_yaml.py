"""A safe YAML loader that refuses duplicate keys and reads ``3e5`` as a number (see
:mod:`stability._yaml`: PyYAML's YAML 1.1 wants ``3.0e+5``)."""

from __future__ import annotations

from typing import Any

import yaml

from stability._yaml import read_exponents_as_floats


class YamlError(ValueError):
    """A file that is not readable YAML, with the line where reading stopped."""


class _Loader(yaml.SafeLoader):
    pass


def _mapping(loader: _Loader, node: yaml.MappingNode, deep: bool = False) -> dict:
    loader.flatten_mapping(node)
    out: dict[Any, Any] = {}
    for key_node, value_node in node.value:
        key = loader.construct_object(key_node, deep=deep)
        try:
            hash(key)
        except TypeError:
            raise YamlError(f"line {key_node.start_mark.line + 1}: a mapping key must be a plain value") from None
        if key in out:
            raise YamlError(f"line {key_node.start_mark.line + 1}: duplicate key '{key}'")
        out[key] = loader.construct_object(value_node, deep=deep)
    return out


_Loader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _mapping)
read_exponents_as_floats(_Loader)


def load_yaml(text: str) -> Any:
    """Parse ``text`` with the safe loader; raise :class:`YamlError` with a line number."""
    try:
        return yaml.load(text, Loader=_Loader)  # noqa: S506 - _Loader derives from SafeLoader
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        where = f"line {mark.line + 1}, column {mark.column + 1}: " if mark else ""
        raise YamlError(f"{where}{exc.problem or exc}") from None
    except (yaml.YAMLError, RecursionError) as exc:
        raise YamlError(f"not valid YAML ({type(exc).__name__})") from None


class _Dumper(yaml.SafeDumper):
    def ignore_aliases(self, data: Any) -> bool:  # write repeated values out, never as &id001 anchors
        return True


def dump_yaml(data: Any) -> str:
    return yaml.dump(data, Dumper=_Dumper, sort_keys=False, default_flow_style=None)


def yaml_block(data: Any) -> str:
    """Block style throughout (for files people read and edit, e.g. rl-zoo3 hyperparameters)."""
    return yaml.dump(data, Dumper=_Dumper, sort_keys=False, default_flow_style=False)
