"""models.engine without a model: where a call's pass runs."""

from types import SimpleNamespace

import numpy as np

from models.engine import LOOP_PASS_TOKENS, Engine


def engine(short_lone_pass: bool = True, held: int = 0) -> Engine:
    made = object.__new__(Engine)
    made.short_lone_pass, made.thread = short_lone_pass, SimpleNamespace(held=held)
    return made


def texts(*lengths: int) -> list[np.ndarray]:
    return [np.ones(length, dtype=np.int32) for length in lengths]


def test_a_lone_short_text_runs_on_the_loop_only_when_nothing_else_is_answered():
    """One text of at most LOOP_PASS_TOKENS, the Encoder's only request, the inference thread idle,
    on a backend whose warm lone pass was short; any other case hops to the inference thread."""
    assert engine().on_the_loop(texts(LOOP_PASS_TOKENS), alone=True)
    assert not engine().on_the_loop(texts(LOOP_PASS_TOKENS + 1), alone=True)
    assert not engine().on_the_loop(texts(4, 4), alone=True)
    assert not engine().on_the_loop(texts(4), alone=False)
    assert not engine(held=1).on_the_loop(texts(4), alone=True)
    assert not engine(short_lone_pass=False).on_the_loop(texts(4), alone=True)
