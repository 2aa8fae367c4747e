"""Read models derived from events: transcript, context window, timeline, replay."""
