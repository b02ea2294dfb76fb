"""The benchmark cases, one module per workload; MODULES is the order of the report."""

MODULES = ["framing", "small", "random_access", "images", "images_crop", "images_photo", "images_large", "tuning",
           "detection", "loader", "arrays", "sequences", "memory", "convert", "remote"]
