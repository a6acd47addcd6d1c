"""Tools that build the shipped warm starts (`python -m flywheel.workshop.sft_recipes`); no
module of a run imports them."""
