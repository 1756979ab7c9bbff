from pympi_gpu.cli import main

main()
