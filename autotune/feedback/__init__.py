"""Run-time feedback: on-line learned corrections, the guard, load balancing and measured host speeds."""
