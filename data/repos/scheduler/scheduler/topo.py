"""Topological ordering and cycle detection."""

from .graph import CycleError


def in_degrees(project):
    """Return {task: number of prerequisites}."""
    return {t: len(project.predecessors(t)) for t in project.tasks()}


def find_cycle(project):
    """Return one dependency cycle as a list of names (first == last), or None."""
    state = {t: 0 for t in project.tasks()}
    stack = []

    def visit(node):
        """Depth-first search that returns a cycle through the current stack, if any."""
        state[node] = 1
        stack.append(node)
        for dep in project.predecessors(node):
            if state[dep] == 1:
                start = stack.index(dep)
                return stack[start:] + [dep]
            if state[dep] == 0:
                found = visit(dep)
                if found:
                    return found
        stack.pop()
        state[node] = 2
        return None

    for task in project.tasks():
        if state[task] == 0:
            cycle = visit(task)
            if cycle:
                return cycle
    return None


def has_cycle(project):
    """Return True if the project contains a dependency cycle."""
    return find_cycle(project) is not None


def topological_order(project):
    """Kahn's algorithm; ties are broken alphabetically. Raises CycleError."""
    remaining = in_degrees(project)
    ready = sorted(t for t, n in remaining.items() if n == 0)
    order = []
    while ready:
        task = ready.pop(0)
        order.append(task)
        for succ in project.successors(task):
            remaining[succ] -= 1
            if remaining[succ] == 0:
                ready.append(succ)
        ready.sort()
    if len(order) < len(remaining):
        raise CycleError(find_cycle(project))
    return order


def levels(project):
    """Group tasks into stages: a task's level is 1 + the max level of its prerequisites."""
    level = {}
    for task in topological_order(project):
        deps = project.predecessors(task)
        level[task] = 1 + max((level[d] for d in deps), default=-1)
    stages = []
    for task in sorted(level, key=lambda t: (level[t], t)):
        if level[task] == len(stages):
            stages.append([])
        stages[level[task]].append(task)
    return stages


def ancestors(project, name):
    """Return all tasks that must finish before the given task, sorted."""
    seen = set()
    pending = list(project.predecessors(name))
    while pending:
        task = pending.pop()
        if task not in seen:
            seen.add(task)
            pending.extend(project.predecessors(task))
    return sorted(seen)


def is_valid_order(project, order):
    """Return True if the order lists every task once with prerequisites first."""
    if sorted(order) != project.tasks():
        return False
    position = {t: i for i, t in enumerate(order)}
    for task in order:
        for dep in project.predecessors(task):
            if position[dep] > position[task]:
                return False
    return True
