"""Critical path method and a simple multi-worker list schedule."""

from .graph import SchedulingError
from .topo import topological_order


class Timing:
    """Earliest/latest start and finish of one task."""

    def __init__(self, es, ef, ls, lf):
        self.es = es
        self.ef = ef
        self.ls = ls
        self.lf = lf

    @property
    def slack(self):
        """Total float: how long the task can slip without delaying the project."""
        return self.ls - self.es

    def is_critical(self):
        """Return True if the task has no slack."""
        return self.slack == 0

    def as_tuple(self):
        """Return (es, ef, ls, lf)."""
        return (self.es, self.ef, self.ls, self.lf)


def earliest_times(project, start=0):
    """Forward pass: {task: (earliest start, earliest finish)}."""
    times = {}
    for task in topological_order(project):
        es = max((times[d][1] for d in project.predecessors(task)), default=start)
        times[task] = (es, es + project.duration(task))
    return times


def project_duration(project, start=0):
    """Earliest completion time of the whole project minus the start time."""
    times = earliest_times(project, start)
    if not times:
        return 0
    return max(ef for _, ef in times.values()) - start


def latest_times(project, deadline=None):
    """Backward pass: {task: (latest start, latest finish)} for the given deadline."""
    if deadline is None:
        deadline = project_duration(project)
    if deadline < project_duration(project):
        raise SchedulingError("deadline %r is shorter than the project" % deadline)
    times = {}
    for task in reversed(topological_order(project)):
        lf = min((times[s][0] for s in project.successors(task)), default=deadline)
        times[task] = (lf - project.duration(task), lf)
    return times


def analyse(project, deadline=None):
    """Run both passes and return {task: Timing}."""
    early = earliest_times(project)
    late = latest_times(project, deadline)
    return {t: Timing(early[t][0], early[t][1], late[t][0], late[t][1]) for t in early}


def slack(project, deadline=None):
    """Return {task: slack}."""
    return {t: timing.slack for t, timing in analyse(project, deadline).items()}


def critical_tasks(project):
    """Return the sorted names of tasks with zero slack."""
    return sorted(t for t, timing in analyse(project).items() if timing.is_critical())


def critical_path(project):
    """Return one critical path from a root to a leaf, preferring alphabetical order."""
    timing = analyse(project)
    if not timing:
        return []
    current = min(t for t in project.roots() if timing[t].is_critical())
    path = [current]
    while True:
        nxt = [
            s
            for s in project.successors(current)
            if timing[s].is_critical() and timing[s].es == timing[current].ef
        ]
        if not nxt:
            return path
        current = nxt[0]
        path.append(current)


def list_schedule(project, workers):
    """Greedy schedule on `workers` identical workers; returns {task: (start, worker)}."""
    if workers < 1:
        raise SchedulingError("need at least one worker")
    order = topological_order(project)
    free_at = [0] * workers
    finish = {}
    result = {}
    for task in order:
        ready = max((finish[d] for d in project.predecessors(task)), default=0)
        worker = min(range(workers), key=lambda w: (max(free_at[w], ready), w))
        start = max(free_at[worker], ready)
        finish[task] = start + project.duration(task)
        free_at[worker] = finish[task]
        result[task] = (start, worker)
    return result


def makespan(project, workers):
    """Completion time of the greedy list schedule."""
    schedule = list_schedule(project, workers)
    return max((s + project.duration(t) for t, (s, _) in schedule.items()), default=0)
