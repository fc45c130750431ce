"""The fast unit tier: no Ray, no servers; real stores on local disk and in memory."""

from __future__ import annotations
