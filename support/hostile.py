"""Hostile message content for the tests: values of any type and size a producer can send.

Importable by the workers too: a message pickled with an :class:`Unprintable` in it is read
back there.
"""

from __future__ import annotations

from hypothesis import strategies as st


class Unprintable:
    """A value (pickle can carry one) whose ``str``, ``repr`` and ``==`` raise."""

    def __str__(self) -> str:
        raise RuntimeError("no str")

    __repr__ = __str__

    def __eq__(self, other: object) -> bool:
        raise RuntimeError("no eq")

    __hash__ = object.__hash__


texts = st.text(alphabet=st.characters(exclude_categories=()), max_size=40)
"""Any code points, lone surrogates and control characters included."""
scalars = st.one_of(
    texts,
    st.binary(max_size=20),
    st.integers(),
    st.builds(lambda: 10**5000),  # past Python's int-to-str limit (just() would repr it)
    st.floats(allow_nan=True, allow_infinity=True),
    st.booleans(),
    st.none(),
    st.builds(lambda: "x" * 1_000_000),
    st.builds(Unprintable),
)
values = st.recursive(
    scalars,
    lambda inner: st.one_of(st.lists(inner, max_size=3), st.dictionaries(texts, inner, max_size=3)),
    max_leaves=6,
)
"""Any value: scalars, and lists and dicts of them."""
