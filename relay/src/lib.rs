//! The relay: authority on what each lockstep turn contains.
