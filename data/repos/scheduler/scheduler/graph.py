"""Project definition: tasks, durations and dependencies."""


class SchedulingError(ValueError):
    """Raised for invalid project definitions."""


class CycleError(SchedulingError):
    """Raised when the dependency graph contains a cycle."""

    def __init__(self, cycle):
        super().__init__("dependency cycle: " + " -> ".join(cycle))
        self.cycle = cycle


class Project:
    """A set of named tasks with durations and prerequisite tasks."""

    def __init__(self):
        self.durations = {}
        self.deps = {}

    def add_task(self, name, duration, deps=()):
        """Add a task; prerequisites may be added later."""
        if name in self.durations:
            raise SchedulingError("duplicate task %r" % name)
        if duration < 0:
            raise SchedulingError("negative duration for %r" % name)
        if name in deps:
            raise CycleError([name, name])
        self.durations[name] = duration
        self.deps[name] = sorted(set(deps))
        return self

    def tasks(self):
        """Return all task names, sorted."""
        return sorted(self.durations)

    def duration(self, name):
        """Return the duration of a task."""
        return self.durations[name]

    def predecessors(self, name):
        """Return the sorted prerequisites of a task."""
        return list(self.deps[name])

    def successors(self, name):
        """Return the sorted tasks that directly depend on the given task."""
        return sorted(t for t, deps in self.deps.items() if name in deps)

    def validate(self):
        """Check that every prerequisite refers to a known task."""
        for name in self.tasks():
            for dep in self.deps[name]:
                if dep not in self.durations:
                    raise SchedulingError("%r depends on unknown task %r" % (name, dep))

    def roots(self):
        """Tasks without prerequisites."""
        return [t for t in self.tasks() if not self.deps[t]]

    def leaves(self):
        """Tasks that nothing depends on."""
        return [t for t in self.tasks() if not self.successors(t)]

    def total_work(self):
        """Sum of all task durations."""
        return sum(self.durations.values())


def project_from_dict(spec):
    """Build a Project from {name: (duration, [deps])}."""
    project = Project()
    for name in sorted(spec):
        duration, deps = spec[name]
        project.add_task(name, duration, deps)
    project.validate()
    return project
