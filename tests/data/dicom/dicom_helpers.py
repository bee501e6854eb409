"""What the tests of gcl_monai.data.dicom share besides fixtures (those are in conftest.py)."""

#: the phantom's image size in the DICOM archives of these tests (rows, columns)
SIZE = (32, 32)
#: the patients of the shared archive (conftest.py's ``archive``)
NUM_PATIENTS = 3
