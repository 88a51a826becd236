"""EAGLE-3 draft trainer that learns from hidden states captured while serving."""
