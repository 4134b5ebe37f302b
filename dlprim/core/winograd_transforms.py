"""The transform matrices of Winograd F(m, r) (Toom-Cook, as in Lavin & Gray, "Fast
Algorithms for Convolutional Neural Networks", 2015), built exactly (Fractions) from
interpolation points, for ``kernels/conv_winograd.cl`` to spell out at render time.

With n = m + r - 1 and the n - 1 finite points p_j plus the point at infinity, one 1-D
output tile of the correlation y_i = sum_k g_k d_(i+k) is ``AT ((G g) .* (BT d))``:

- ``AT`` (m x n): row i holds p_j^i, and 1 at infinity in the last row;
- ``G`` (n x r): row j holds p_j^k / N_j with N_j = prod over l != j of (p_j - p_l); the
  last row picks g's last tap;
- ``BT`` (n x n): row j holds the coefficients (ascending powers) of prod over l != j of
  (x - p_l), the last row those of prod over all l.

The 2-D transforms apply each matrix along both axes.
"""
from fractions import Fraction

__all__ = ["POINTS", "KERNELS", "TILES", "matrices"]

_H = Fraction(1, 2)
# the finite points of each (m, r). 0, +-1, +-2 for the 6-wide tiles (F(4x4, 3x3) and
# F(2x2, 5x5) round alike); F(4x4, 5x5)'s 8-wide tile adds +-1/2, whose powers stay exact
POINTS = {(2, 3): (0, 1, -1), (4, 3): (0, 1, -1, 2, -2), (2, 5): (0, 1, -1, 2, -2),
          (4, 5): (0, 1, -1, 2, -2, _H, -_H)}
KERNELS = (3, 5)  # the filter sizes r served
TILES = (2, 4)    # the output tiles m served


def _times(a, b):
    """The product of two polynomials given by ascending coefficients."""
    out = [Fraction(0)] * (len(a) + len(b) - 1)
    for i, x in enumerate(a):
        for j, y in enumerate(b):
            out[i + j] += x * y
    return out


def matrices(m, r):
    """``dict(AT=..., G=..., BT=...)`` of F(m, r): lists of rows of Fractions."""
    if (m, r) not in POINTS:
        raise ValueError("Winograd F(%r, %r): the tiles are %s and the filter sizes %s"
                         % (m, r, TILES, KERNELS))
    points = [Fraction(p) for p in POINTS[m, r]]
    last = [Fraction(1)]
    AT = [[p ** i for p in points] + [Fraction(int(i == m - 1))] for i in range(m)]
    G, BT = [], []
    for p in points:
        norm, poly = Fraction(1), [Fraction(1)]
        for q in points:
            if q != p:
                norm *= p - q
                poly = _times(poly, [-q, Fraction(1)])
        G.append([p ** k / norm for k in range(r)])
        BT.append(poly + [Fraction(0)])
        last = _times(last, [-p, Fraction(1)])
    G.append([Fraction(0)] * (r - 1) + [Fraction(1)])
    BT.append(last)
    return dict(AT=AT, G=G, BT=BT)
