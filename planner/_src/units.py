"""Units, once: budgets are in GB = 10^9 bytes, the unit of GPU datasheets (H200: 141 GB)."""

GB = 1e9
MB = 1e6
KB = 1e3
KIB = 1024


def fmt_bytes(nbytes: float) -> str:
    """A size in a unit that shows it: GB with three decimals from 0.1 GB up (as budgets are
    given), else MB, KB or bytes, so a small model never reads "0.000 GB"."""
    n = float(nbytes)
    a = abs(n)
    if a >= 0.1 * GB:
        return f"{n / GB:.3f} GB"
    if a >= 0.1 * MB:
        return f"{n / MB:.3f} MB"
    if a >= 0.1 * KB:
        return f"{n / KB:.3f} KB"
    return f"{n:.0f} B"


def fmt_pair(a: float, b: float) -> tuple[str, str]:
    """``fmt_bytes`` of two sizes, in exact bytes where the rounded figures would read alike
    though the sizes differ ("1.835 MB" against "1.835 MB" one byte apart)."""
    sa, sb = fmt_bytes(a), fmt_bytes(b)
    if sa == sb and round(a) != round(b):
        return f"{a:,.0f} B", f"{b:,.0f} B"
    return sa, sb


def fmt_gb(gb: float) -> str:
    """``fmt_bytes`` of a figure held in GB."""
    return fmt_bytes(gb * GB)


def gb_at_least(nbytes: float) -> str:
    """``nbytes`` as an ``hbm_gb`` value to pass, rounded UP to four significant digits, so
    the figure always admits ``nbytes`` and still tells small budgets apart (7.080 MB is
    "0.00708", where three decimals of a GB gave "0.008", 13% more than needed)."""
    import math

    gb = max(float(nbytes), 1.0) / GB
    exp = math.floor(math.log10(gb))
    step = 10.0 ** (exp - 3)
    value = math.ceil(gb / step - 1e-9) * step
    return f"{value:.{max(0, 3 - exp)}f}"
