"""Event-driven simulation of a multi-teller FIFO queue."""

import heapq

from .models import Record, make_customers

DEPARTURE = 0
ARRIVAL = 1


class SimulationResult:
    """Served records, balked customer ids and the queue length log."""

    def __init__(self, tellers, records, balked, queue_log):
        self.tellers = tellers
        self.records = records
        self.balked = balked
        self.queue_log = queue_log

    @property
    def served(self):
        """Number of customers that were served."""
        return len(self.records)

    @property
    def end_time(self):
        """Time the last customer departed (0 if nobody was served)."""
        if not self.records:
            return 0
        return max(r.finish for r in self.records)

    def record_for(self, cid):
        """Return the record for a customer id."""
        for record in self.records:
            if record.cid == cid:
                return record
        raise KeyError(cid)


class _State:
    def __init__(self, tellers):
        self.free = list(range(tellers))
        self.queue = []
        self.records = []
        self.balked = []
        self.log = [(0, 0)]

    def log_queue(self, time):
        """Record the queue length at `time`, merging entries at the same instant."""
        length = len(self.queue)
        if self.log[-1][0] == time:
            self.log[-1] = (time, length)
        elif self.log[-1][1] != length:
            self.log.append((time, length))

    def take_teller(self):
        """Remove and return the lowest-numbered free teller."""
        self.free.sort()
        return self.free.pop(0)


def _start_service(state, events, customer, teller, time):
    finish = time + customer.service
    state.records.append(Record(customer.cid, customer.arrival, time, finish, teller))
    heapq.heappush(events, (finish, DEPARTURE, teller, teller))


def simulate_customers(customers, tellers=1, max_queue=None):
    """Simulate the given customers; departures at time t happen before arrivals at t."""
    if tellers < 1:
        raise ValueError("need at least one teller")
    state = _State(tellers)
    events = []
    for order, customer in enumerate(customers):
        heapq.heappush(events, (customer.arrival, ARRIVAL, order, customer))
    while events:
        time, kind, _, payload = heapq.heappop(events)
        if kind == DEPARTURE:
            if state.queue:
                _start_service(state, events, state.queue.pop(0), payload, time)
            else:
                state.free.append(payload)
        elif state.free:
            _start_service(state, events, payload, state.take_teller(), time)
        elif max_queue is not None and len(state.queue) >= max_queue:
            state.balked.append(payload.cid)
        else:
            state.queue.append(payload)
        state.log_queue(time)
    records = sorted(state.records, key=lambda r: r.cid)
    return SimulationResult(tellers, records, sorted(state.balked), state.log)


def simulate(arrivals, services, tellers=1, max_queue=None):
    """Simulate customers given parallel lists of arrival and service times."""
    return simulate_customers(make_customers(arrivals, services), tellers, max_queue)
