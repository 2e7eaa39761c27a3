"""Summary statistics over a SimulationResult."""


def _mean(values):
    values = list(values)
    if not values:
        return 0.0
    return sum(values) / len(values)


def average_wait(result):
    """Mean waiting time of served customers."""
    return _mean(r.wait for r in result.records)


def max_wait(result):
    """Longest waiting time (0 if nobody was served)."""
    return max((r.wait for r in result.records), default=0)


def average_time_in_system(result):
    """Mean time from arrival to departure."""
    return _mean(r.time_in_system for r in result.records)


def count_waited(result, threshold=0):
    """Number of customers whose wait was strictly longer than the threshold."""
    return sum(1 for r in result.records if r.wait > threshold)


def service_level(result, target):
    """Fraction of served customers who started within `target` time of arriving."""
    if not result.records:
        return 1.0
    within = sum(1 for r in result.records if r.wait <= target)
    return within / len(result.records)


def busy_time(result, teller):
    """Total time the given teller spent serving."""
    return sum(r.service for r in result.records if r.teller == teller)


def utilisation(result, horizon=None):
    """Fraction of available teller time spent serving, up to the horizon."""
    end = result.end_time if horizon is None else horizon
    if end <= 0:
        return 0.0
    used = 0
    for record in result.records:
        used += max(0, min(record.finish, end) - min(record.start, end))
    return used / (end * result.tellers)


def teller_loads(result):
    """Return a list with the number of customers served by each teller."""
    loads = [0] * result.tellers
    for record in result.records:
        loads[record.teller] += 1
    return loads


def max_queue_length(result):
    """Largest number of customers waiting at once."""
    return max(length for _, length in result.queue_log)


def average_queue_length(result, horizon=None):
    """Time-weighted average queue length between 0 and the horizon."""
    end = result.end_time if horizon is None else horizon
    if end <= 0:
        return 0.0
    area = 0
    log = result.queue_log
    for index, (time, length) in enumerate(log):
        if time >= end:
            break
        following = log[index + 1][0] if index + 1 < len(log) else end
        area += length * (min(following, end) - time)
    return area / end


def balk_rate(result):
    """Fraction of all arriving customers that left without service."""
    total = result.served + len(result.balked)
    if total == 0:
        return 0.0
    return len(result.balked) / total


def throughput(result):
    """Customers served per unit time over the simulation."""
    if result.end_time == 0:
        return 0.0
    return result.served / result.end_time


def summary(result):
    """Return a dict of the main statistics, rounded to 4 digits."""
    return {
        "served": result.served,
        "balked": len(result.balked),
        "average_wait": round(average_wait(result), 4),
        "max_wait": max_wait(result),
        "utilisation": round(utilisation(result), 4),
        "max_queue": max_queue_length(result),
        "average_queue": round(average_queue_length(result), 4),
    }
