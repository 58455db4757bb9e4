"""Repeated failures: the first report goes through, the same again only after a while, with a count."""
from kopf._cycle.failures import RepeatLimiter, repeated, signature


class Clock:
    def __init__(self):
        self.now = 0.0

    def __call__(self):
        return self.now


def test_the_first_report_goes_through_and_repeats_are_held_back():
    clock = Clock()
    limiter = RepeatLimiter(interval=10, clock=clock)
    assert limiter.admit('a') == 0
    assert limiter.admit('a') is None
    assert limiter.admit('b') == 0  # another failure is another story
    clock.now = 9.9
    assert limiter.admit('a') is None
    clock.now = 10
    assert limiter.admit('a') == 2  # reported again, with what was held back
    assert limiter.admit('a') is None


def test_only_a_bounded_number_of_failures_is_remembered():
    limiter = RepeatLimiter(capacity=3, clock=Clock())
    for key in 'abcd':
        limiter.admit(key)
    assert len(limiter) == 3
    assert limiter.admit('a') == 0  # forgotten first: reported as new


def test_failures_are_the_same_by_type_and_message():
    assert signature(ValueError('x')) == signature(ValueError('x'))
    assert signature(ValueError('x')) != signature(TypeError('x'))
    assert repeated(0) == ''
    assert '3 more time(s)' in repeated(3)
