"""Learning-rate schedules, with the numbers of PyTorch's schedulers of the same name.

A schedule owns a solver and sets ``solver.lr`` (and for one-cycle the momentum or
Adam's beta1) each time ``step()`` is called: once per epoch or once per iteration, as
the user decides, exactly like ``torch.optim.lr_scheduler``. Construction applies the
first value (PyTorch's initial ``step()``).

All are closed forms of the step count, so ``state_dict`` is just the count (plus the
plateau bookkeeping) and resuming lands on the same sequence.
"""
import math
from typing import Optional

__all__ = ["Schedule", "StepLR", "MultiStepLR", "ExponentialLR", "CosineLR", "OneCycleLR",
           "ReduceLROnPlateau", "create_schedule"]


class Schedule:
    """Base: ``lr_at(t)`` gives the learning rate after ``t`` calls to ``step()``."""

    def __init__(self, solver):
        self.solver = solver
        self.base_lr = float(solver.lr)
        self.last_step = 0
        self._apply()

    def lr_at(self, t):
        """The learning rate after ``t`` calls to ``step()`` (each schedule's formula)."""
        raise NotImplementedError

    def _apply(self):
        self.solver.lr = self.lr_at(self.last_step)

    def step(self, metric: Optional[float] = None) -> float:
        """Advance one step (an epoch or an iteration, as you call it); returns the new lr."""
        self.last_step += 1
        self._apply()
        return self.solver.lr

    @property
    def lr(self):
        """The solver's current learning rate."""
        return self.solver.lr

    def state_dict(self):
        """The step count and base lr: all a resumed run needs."""
        return {"type": type(self).__name__, "last_step": self.last_step, "base_lr": self.base_lr}

    def load_state_dict(self, state):
        """Continue from a ``state_dict()``; sets the solver's lr at once."""
        self.last_step = int(state["last_step"])
        self.base_lr = float(state["base_lr"])
        self._apply()


def _number(name, value, low=None, high=None, low_open=False, high_open=False, integer=False):
    """``value`` as a float (or int), or ValueError "name must be ..., got value".

    NaN and infinity are refused first: NaN passes every bound comparison, and either
    turns the learning rate into NaN or inf for the rest of the run.
    """
    ok = isinstance(value, (int, float)) and not isinstance(value, bool)
    if not ok or not math.isfinite(value):
        raise ValueError("%s must be a finite number, got %r" % (name, value))
    if integer and value != int(value):
        raise ValueError("%s must be an integer, got %r" % (name, value))
    if low is not None and (value <= low if low_open else value < low):
        raise ValueError("%s must be %s %r, got %r" % (name, ">" if low_open else ">=", low, value))
    if high is not None and (value >= high if high_open else value > high):
        raise ValueError("%s must be %s %r, got %r" % (name, "<" if high_open else "<=", high, value))
    return int(value) if integer else float(value)


def _positive(name, value, allow_zero=False):
    return _number(name, value, low=0, low_open=not allow_zero)


class StepLR(Schedule):
    """lr = base * gamma ** (t // step_size)."""

    def __init__(self, solver, step_size, gamma=0.1):
        self.step_size = _number("step_size", step_size, low=0, low_open=True, integer=True)
        self.gamma = _positive("gamma", gamma)
        super().__init__(solver)

    def lr_at(self, t):
        return self.base_lr * self.gamma ** (t // self.step_size)


class MultiStepLR(Schedule):
    """lr = base * gamma ** (number of milestones <= t)."""

    def __init__(self, solver, milestones, gamma=0.1):
        if not isinstance(milestones, (list, tuple)):
            raise ValueError("milestones must be a list of epochs, got %r" % (milestones,))
        self.milestones = sorted(_number("milestones[%d]" % i, m, low=0, integer=True)
                                 for i, m in enumerate(milestones))
        self.gamma = _positive("gamma", gamma)
        super().__init__(solver)

    def lr_at(self, t):
        return self.base_lr * self.gamma ** sum(1 for m in self.milestones if m <= t)


class ExponentialLR(Schedule):
    """lr = base * gamma ** t."""

    def __init__(self, solver, gamma):
        self.gamma = _positive("gamma", gamma)
        super().__init__(solver)

    def lr_at(self, t):
        return self.base_lr * self.gamma ** t


class CosineLR(Schedule):
    """Cosine annealing (PyTorch's CosineAnnealingLR), optionally after a linear warmup.

    With ``warmup`` steps, lr rises linearly from ``base * warmup_start`` to base, then
    follows ``eta_min + (base - eta_min) * (1 + cos(pi * t' / T_max)) / 2`` with t' counted
    from the end of warmup. ``warmup=0`` is exactly PyTorch's schedule.
    """

    def __init__(self, solver, T_max, eta_min=0.0, warmup=0, warmup_start=0.0):
        self.T_max = _number("T_max", T_max, low=0, low_open=True, integer=True)
        self.eta_min = _positive("eta_min", eta_min, allow_zero=True)
        self.warmup = _number("warmup", warmup, low=0, integer=True)
        self.warmup_start = _number("warmup_start", warmup_start, low=0, high=1)
        super().__init__(solver)

    def lr_at(self, t):
        if t < self.warmup:
            frac = self.warmup_start + (1 - self.warmup_start) * t / self.warmup
            return self.base_lr * frac
        t -= self.warmup
        return self.eta_min + (self.base_lr - self.eta_min) * (1 + math.cos(math.pi * t / self.T_max)) / 2


class OneCycleLR(Schedule):
    """PyTorch's OneCycleLR (two phases, cosine annealing, cycled momentum).

    lr goes from max_lr/div_factor up to max_lr over ``pct_start`` of the steps, then down
    to initial_lr/final_div_factor; momentum (SGD) or beta1 (Adam) moves inversely between
    max_momentum and base_momentum when ``cycle_momentum``.
    """

    def __init__(self, solver, max_lr, total_steps, pct_start=0.3, div_factor=25.0,
                 final_div_factor=1e4, cycle_momentum=True, base_momentum=0.85,
                 max_momentum=0.95):
        self.max_lr = _positive("max_lr", max_lr)
        self.total_steps = _number("total_steps", total_steps, low=0, low_open=True, integer=True)
        pct_start = _number("pct_start", pct_start, low=0, high=1)
        self.initial_lr = self.max_lr / _positive("div_factor", div_factor)
        self.min_lr = self.initial_lr / _positive("final_div_factor", final_div_factor)
        # the momentum (or Adam's beta1) it sets must stay a valid one: [0, 1)
        base_momentum = _number("base_momentum", base_momentum, low=0, high=1, high_open=True)
        max_momentum = _number("max_momentum", max_momentum, low=0, high=1, high_open=True)
        if not isinstance(cycle_momentum, bool):
            raise ValueError("cycle_momentum must be true or false, got %r" % (cycle_momentum,))
        self.phase_end = float(pct_start * self.total_steps) - 1
        self.cycle_momentum = cycle_momentum
        self.base_momentum, self.max_momentum = base_momentum, max_momentum
        self._momentum_attr = "beta1" if hasattr(solver, "beta1") else "momentum"
        super().__init__(solver)

    @staticmethod
    def _cos(start, end, pct):
        return end + (start - end) / 2.0 * (math.cos(math.pi * pct) + 1)

    def _phase(self, t):
        if t <= self.phase_end:
            pct = t / self.phase_end if self.phase_end > 0 else 1.0
            return (self._cos(self.initial_lr, self.max_lr, pct),
                    self._cos(self.max_momentum, self.base_momentum, pct))
        span = self.total_steps - 1 - self.phase_end
        pct = (t - self.phase_end) / span if span > 0 else 1.0
        return (self._cos(self.max_lr, self.min_lr, pct),
                self._cos(self.base_momentum, self.max_momentum, pct))

    def lr_at(self, t):
        if t > self.total_steps:
            raise ValueError("OneCycleLR stepped %d times, beyond total_steps=%d"
                             % (t, self.total_steps))
        return self._phase(t)[0]

    def _apply(self):
        self.lr_at(self.last_step)  # range check
        lr, momentum = self._phase(self.last_step)
        self.solver.lr = lr
        if self.cycle_momentum:
            setattr(self.solver, self._momentum_attr, momentum)


class ReduceLROnPlateau(Schedule):
    """Multiply lr by ``factor`` after ``patience`` steps without improvement of ``metric``.

    As PyTorch's: mode min/max, relative or absolute threshold, cooldown, min_lr.
    """

    def __init__(self, solver, mode="min", factor=0.1, patience=10, threshold=1e-4,
                 threshold_mode="rel", cooldown=0, min_lr=0.0, eps=1e-8):
        if mode not in ("min", "max"):
            raise ValueError("mode must be 'min' or 'max', got %r" % mode)
        if threshold_mode not in ("rel", "abs"):
            raise ValueError("threshold_mode must be 'rel' or 'abs', got %r" % threshold_mode)
        self.mode, self.threshold_mode = mode, threshold_mode
        self.factor = _number("factor", factor, low=0, high=1, low_open=True, high_open=True)
        self.patience = _number("patience", patience, low=0, integer=True)
        self.threshold = _positive("threshold", threshold, allow_zero=True)
        self.cooldown = _number("cooldown", cooldown, low=0, integer=True)
        self.min_lr = _positive("min_lr", min_lr, allow_zero=True)
        self.eps = _positive("eps", eps, allow_zero=True)
        self.best = math.inf if mode == "min" else -math.inf
        self.bad_steps = 0
        self.cooldown_left = 0
        self.current_lr = float(solver.lr)
        super().__init__(solver)

    def lr_at(self, t):
        return self.current_lr

    def _better(self, a):
        if self.mode == "min":
            ref = self.best * (1 - self.threshold) if self.threshold_mode == "rel" else self.best - self.threshold
            return a < ref
        ref = self.best * (1 + self.threshold) if self.threshold_mode == "rel" else self.best + self.threshold
        return a > ref

    def step(self, metric: Optional[float] = None) -> float:
        """Record ``metric`` (required: e.g. the validation loss); lower the lr by ``factor``
        after more than ``patience`` steps without improvement, then wait ``cooldown`` steps.
        """
        if metric is None:
            raise ValueError("ReduceLROnPlateau.step needs the metric (e.g. validation loss)")
        metric = float(metric)
        self.last_step += 1
        if self._better(metric):
            self.best, self.bad_steps = metric, 0
        else:
            self.bad_steps += 1
        if self.cooldown_left > 0:
            self.cooldown_left -= 1
            self.bad_steps = 0
        if self.bad_steps > self.patience:
            new_lr = max(self.current_lr * self.factor, self.min_lr)
            if self.current_lr - new_lr > self.eps:
                self.current_lr = new_lr
            self.cooldown_left, self.bad_steps = self.cooldown, 0
        self._apply()
        return self.solver.lr

    def state_dict(self):
        """The step count plus the best metric, bad-step and cooldown counters and lr."""
        state = super().state_dict()
        state.update(best=self.best, bad_steps=self.bad_steps, cooldown_left=self.cooldown_left,
                     current_lr=self.current_lr)
        return state

    def load_state_dict(self, state):
        """Continue from a ``state_dict()``."""
        self.best, self.bad_steps = float(state["best"]), int(state["bad_steps"])
        self.cooldown_left, self.current_lr = int(state["cooldown_left"]), float(state["current_lr"])
        super().load_state_dict(state)


_SCHEDULES = {"step": StepLR, "multistep": MultiStepLR, "exponential": ExponentialLR,
              "cosine": CosineLR, "onecycle": OneCycleLR, "plateau": ReduceLROnPlateau}


def create_schedule(solver, config):
    """A schedule from a training config's ``schedule`` section ({"type": ..., args})."""
    if not config:
        return None
    args = dict(config)
    kind = args.pop("type", None)
    if kind not in _SCHEDULES:
        raise ValueError("schedule.type: unknown %r; known: %s" % (kind, ", ".join(sorted(_SCHEDULES))))
    return _SCHEDULES[kind](solver, **args)
