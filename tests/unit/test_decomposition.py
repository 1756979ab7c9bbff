import pytest

from pympi_gpu.mpi.decomposition import block_counts, block_owner, block_range, block_starts


@pytest.mark.parametrize("n", [0, 1, 2, 3, 7, 10, 64, 1001])
@pytest.mark.parametrize("size", [1, 2, 3, 4, 7, 16])
def test_blocks_partition_exactly(n, size):
    ranges = [block_range(n, size, r) for r in range(size)]
    assert ranges[0][0] == 0 and ranges[-1][1] == n
    for (a, b), (c, _) in zip(ranges, ranges[1:]):
        assert b == c  # contiguous, no gap, no overlap
    counts = block_counts(n, size)
    assert sum(counts) == n and [b - a for a, b in ranges] == counts
    assert max(counts) - min(counts) <= 1
    assert block_starts(n, size) == [a for a, _ in ranges]
    for i in range(n):
        r = block_owner(i, n, size)
        assert ranges[r][0] <= i < ranges[r][1]


def test_huge_counts_are_exact():
    n = 2**53 + 1
    assert sum(block_counts(n, 3)) == n
    assert block_range(n, 3, 2)[1] == n


@pytest.mark.parametrize("args", [(5, 0, 0), (5, 2, 2), (5, 2, -1), (-1, 2, 0)])
def test_bad_arguments(args):
    with pytest.raises(ValueError):
        block_range(*args)
