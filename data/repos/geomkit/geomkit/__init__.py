"""geomkit: small 2D computational geometry toolkit."""

from .hull import convex_hull, diameter, extreme_point, hull_area, hull_perimeter
from .polygon import BOUNDARY, INSIDE, OUTSIDE, area, bounding_box, centroid, contains
from .polygon import is_convex, is_counter_clockwise, locate_point, perimeter, signed_area
from .segment import as_vecs, closest_point, distance_to_segment, intersection_point
from .segment import on_segment, project_parameter, segment_length, segments_intersect
from .segment import split_segment
from .vector import Vec, angle_between, distance, midpoint, orientation
