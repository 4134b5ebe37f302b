"""Winograd's transform matrices (core/winograd_transforms.py): exact 1-D tiles."""
from fractions import Fraction

import numpy as np
import pytest

from dlprim.core.winograd_transforms import KERNELS, POINTS, TILES, matrices


@pytest.mark.parametrize("m, r", sorted(POINTS))
def test_one_tile_is_the_correlation_exactly(m, r):
    """AT ((G g) .* (BT d)) is y_i = sum_k g_k d_(i+k) in exact arithmetic, for every
    tap and input position (unit vectors span every g and d)."""
    t = matrices(m, r)
    n = m + r - 1
    assert (len(t["AT"]), len(t["AT"][0]), len(t["G"]), len(t["G"][0]), len(t["BT"]),
            len(t["BT"][0])) == (m, n, n, r, n, n)
    for k in range(r):
        for j in range(n):
            gg = [t["G"][a][k] for a in range(n)]
            bd = [t["BT"][a][j] for a in range(n)]
            y = [sum(t["AT"][i][a] * gg[a] * bd[a] for a in range(n)) for i in range(m)]
            assert y == [Fraction(int(j == i + k)) for i in range(m)], (m, r, k, j)


def test_f4x4_3x3_keeps_its_matrices():
    """F(4x4, 3x3)'s matrices are the ones its error figures (core/tuning.py) were taken with."""
    t = matrices(4, 3)
    assert t["BT"][0] == [4, 0, -5, 0, 1, 0] and t["BT"][5] == [0, 4, 0, -5, 0, 1]
    assert t["G"][3] == [Fraction(1, 24), Fraction(1, 12), Fraction(1, 6)]
    assert t["AT"][3] == [0, 1, -1, 8, -8, 1]


def test_every_served_pair_and_a_clear_error_otherwise():
    assert sorted(POINTS) == [(m, r) for m in TILES for r in KERNELS]
    with pytest.raises(ValueError, match="filter sizes"):
        matrices(4, 7)
    assert np.isfinite(float(matrices(4, 5)["G"][5][4]))
