"""scheduler: dependency ordering and critical path scheduling."""

from .cpm import Timing, analyse, critical_path, critical_tasks, earliest_times, latest_times
from .cpm import list_schedule, makespan, project_duration, slack
from .graph import CycleError, Project, SchedulingError, project_from_dict
from .topo import ancestors, find_cycle, has_cycle, in_degrees, is_valid_order, levels
from .topo import topological_order
