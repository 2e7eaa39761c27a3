"""bankqueue: deterministic discrete-event bank queue simulation."""

from .models import Customer, Record, arrivals_from_gaps, make_customers
from .simulation import SimulationResult, simulate, simulate_customers
from .stats import average_queue_length, average_time_in_system, average_wait, balk_rate
from .stats import busy_time, count_waited, max_queue_length, max_wait, service_level
from .stats import summary, teller_loads, throughput, utilisation
