"""The timer service: delay levels and the timer wheel (its delivery engine lands with scheduled delivery)."""
