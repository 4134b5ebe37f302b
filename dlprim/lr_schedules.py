"""Learning-rate schedules, with the numbers of PyTorch's schedulers of the same name.

A schedule owns a solver and sets ``solver.lr`` (and for one-cycle the momentum or
Adam's beta1) each time ``step()`` is called: once per epoch or once per iteration, as
the user decides, exactly like ``torch.optim.lr_scheduler``. Construction applies the
first value (PyTorch's initial ``step()``).

All are closed forms of the step count, so ``state_dict`` is just the count (plus the
plateau bookkeeping) and resuming lands on the same sequence.
"""
import math

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

    def step(self, metric=None):
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


def _positive(name, value, allow_zero=False):
    if not (value > 0 or (allow_zero and value == 0)):
        raise ValueError("%s must be %s, got %r" % (name, ">= 0" if allow_zero else "> 0", value))


class StepLR(Schedule):
    """lr = base * gamma ** (t // step_size)."""

    def __init__(self, solver, step_size, gamma=0.1):
        _positive("step_size", step_size)
        self.step_size, self.gamma = int(step_size), float(gamma)
        super().__init__(solver)

    def lr_at(self, t):
        return self.base_lr * self.gamma ** (t // self.step_size)


class MultiStepLR(Schedule):
    """lr = base * gamma ** (number of milestones <= t)."""

    def __init__(self, solver, milestones, gamma=0.1):
        self.milestones, self.gamma = sorted(int(m) for m in milestones), float(gamma)
        super().__init__(solver)

    def lr_at(self, t):
        return self.base_lr * self.gamma ** sum(1 for m in self.milestones if m <= t)


class ExponentialLR(Schedule):
    """lr = base * gamma ** t."""

    def __init__(self, solver, gamma):
        _positive("gamma", gamma)
        self.gamma = float(gamma)
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
        _positive("T_max", T_max)
        _positive("warmup", warmup, allow_zero=True)
        self.T_max, self.eta_min = int(T_max), float(eta_min)
        self.warmup, self.warmup_start = int(warmup), float(warmup_start)
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
        _positive("max_lr", max_lr)
        _positive("total_steps", total_steps)
        if not 0 <= pct_start <= 1:
            raise ValueError("pct_start must be in [0, 1], got %r" % pct_start)
        self.max_lr, self.total_steps = float(max_lr), int(total_steps)
        self.initial_lr = self.max_lr / div_factor
        self.min_lr = self.initial_lr / final_div_factor
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
        if not 0 < factor < 1:
            raise ValueError("factor must be in (0, 1), got %r" % factor)
        self.mode, self.factor, self.patience = mode, float(factor), int(patience)
        self.threshold, self.threshold_mode = float(threshold), threshold_mode
        self.cooldown, self.min_lr, self.eps = int(cooldown), float(min_lr), float(eps)
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

    def step(self, metric=None):
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
