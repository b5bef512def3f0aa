"""Task generators: seeded math word problems (and CHAMP), seeded pictures (and Geometry3K)."""
