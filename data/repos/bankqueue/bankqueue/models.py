"""Data records used by the simulation."""


class Customer:
    """A customer with an id, an arrival time and a service duration."""

    def __init__(self, cid, arrival, service):
        if arrival < 0:
            raise ValueError("arrival time must be non-negative")
        if service <= 0:
            raise ValueError("service time must be positive")
        self.cid = cid
        self.arrival = arrival
        self.service = service

    def __repr__(self):
        return "Customer(%r, %r, %r)" % (self.cid, self.arrival, self.service)


class Record:
    """The outcome for one served customer."""

    def __init__(self, cid, arrival, start, finish, teller):
        self.cid = cid
        self.arrival = arrival
        self.start = start
        self.finish = finish
        self.teller = teller

    @property
    def wait(self):
        """Time spent waiting in the queue."""
        return self.start - self.arrival

    @property
    def service(self):
        """Time spent being served."""
        return self.finish - self.start

    @property
    def time_in_system(self):
        """Total time from arrival to departure."""
        return self.finish - self.arrival

    def __repr__(self):
        return "Record(cid=%r, start=%r, finish=%r, teller=%r)" % (
            self.cid,
            self.start,
            self.finish,
            self.teller,
        )


def arrivals_from_gaps(gaps, start=0):
    """Turn inter-arrival gaps into absolute arrival times."""
    times = []
    current = start
    for gap in gaps:
        if gap < 0:
            raise ValueError("gaps must be non-negative")
        current += gap
        times.append(current)
    return times


def make_customers(arrivals, services):
    """Build customers numbered from 1 from parallel arrival and service lists."""
    if len(arrivals) != len(services):
        raise ValueError("arrivals and services must have the same length")
    customers = []
    for index in range(len(arrivals)):
        customers.append(Customer(index + 1, arrivals[index], services[index]))
    return customers
