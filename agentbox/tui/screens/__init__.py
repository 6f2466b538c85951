"""Screens: the dashboard, detail views and the modals of run actions."""
