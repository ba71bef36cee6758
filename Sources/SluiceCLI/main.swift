import Sluice

print("sluice")
