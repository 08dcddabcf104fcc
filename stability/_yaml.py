"""YAML numbers as people write them: ``3e5`` and ``1e-8`` read as floats.

PyYAML follows YAML 1.1, where a float needs a dot (``3.0e+5``): ``3e5`` comes back as the
string ``'3e5'``. Hyperparameter files are full of such numbers (a learning rate of 3e-4, a
gradient clip of 1e-8), so every loader here reads them as YAML 1.2 does.
"""

from __future__ import annotations

import re

import yaml

FLOAT = re.compile(
    r"""^(?:[-+]?(?:[0-9][0-9_]*)\.[0-9_]*(?:[eE][-+]?[0-9]+)?
    |[-+]?(?:[0-9][0-9_]*)(?:[eE][-+]?[0-9]+)
    |\.[0-9_]+(?:[eE][-+][0-9]+)?
    |[-+]?\.(?:inf|Inf|INF)
    |\.(?:nan|NaN|NAN))$""",
    re.X,
)
_FLOAT_TAG = "tag:yaml.org,2002:float"


def read_exponents_as_floats(loader: type[yaml.SafeLoader]) -> None:
    """Replace ``loader``'s YAML 1.1 float resolver (inherited from SafeLoader) with one that also
    reads an exponent without a dot as a float."""
    loader.yaml_implicit_resolvers = {
        first: [(tag, rx) for tag, rx in resolvers if tag != _FLOAT_TAG]
        for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
    }
    loader.add_implicit_resolver(_FLOAT_TAG, FLOAT, list("-+0123456789."))
