"""The policies above the pure core: the slot line, busy and loading waits, retries, the stall
watch and the thinking budget."""
